# shellcheck shell=bash
# Shared helpers for the node scripts in components/scripts/.
#
# Functions only: components/host_scripts.py renders each script as one program
# (inputs, then this file, then the script body) that runs with `sudo bash -s`.
# A script run from a checkout sources this file itself.
#
# Optional tunables (all have defaults; none is required):
#   RETRY_BASE_SECONDS         first retry delay, doubled per attempt (default 2)
#   RETRY_MAX_SECONDS          cap on a single retry delay (default 60)
#   APT_LOCK_TIMEOUT_SECONDS   how long apt waits for the dpkg lock (default 600)
#   APT_RETRIES                attempts for apt-get update/install (default 3)
#   CLOUD_INIT_TIMEOUT_SECONDS bound on `cloud-init status --wait` (default 900)
#   DOWNLOAD_RETRIES           attempts for a download (default 5)

# ---- progress and failure ---------------------------------------------------

# init_script <step-name>: name the script for log lines, install the ERR trap.
init_script() {
  STEP="$1"
  set -Eeuo pipefail
  shopt -s inherit_errexit
  trap on_error ERR
}

# log <message...>: "[driver 2/6] message" on stderr (stdout stays for data).
log() {
  printf '[%s %s/%s] %s\n' "${STEP:-host}" "${STEP_INDEX:-0}" "${STEP_COUNT:-0}" "$*" >&2
}

# fatal <message...>: "[driver] FAILED: message" and exit 1.
fatal() {
  printf '[%s] FAILED: %s\n' "${STEP:-host}" "$*" >&2
  exit 1
}

# ERR trap: which step failed, where, and the command (as written, so a secret
# held in a variable shows as its name, never its value). Lines count from the top
# of the rendered program.
on_error() {
  local rc=$? cmd="${BASH_COMMAND}"
  local where="${FUNCNAME[1]:-main}" line="${BASH_LINENO[0]:-?}"
  trap - ERR
  printf '[%s] FAILED at step %s/%s (%s), in %s, line %s, exit %s: %s\n' \
    "${STEP:-host}" "${STEP_INDEX:-0}" "${STEP_COUNT:-0}" "${STEP_TITLE:-setup}" \
    "${where}" "${line}" "${rc}" "${cmd}" >&2
  exit "${rc}"
}

# require_vars VAR...: fail before touching anything, naming every missing input.
require_vars() {
  local name missing=()
  for name in "$@"; do
    if [[ -z "${!name:-}" ]]; then
      missing+=("${name}")
    fi
  done
  if ((${#missing[@]} > 0)); then
    fatal "missing required input(s): ${missing[*]}"
  fi
}

# run_steps fn...: call each function in order as step i/n, logging its name.
run_steps() {
  STEP_COUNT=$#
  STEP_INDEX=0
  local fn
  for fn in "$@"; do
    STEP_INDEX=$((STEP_INDEX + 1))
    STEP_TITLE="${fn//_/ }"
    log "${STEP_TITLE}"
    "${fn}"
  done
}

# ---- temporary files --------------------------------------------------------

# make_temp_dir: one private (0700) directory per run, removed on exit even on
# failure. Call it from the main shell, not a $(...) subshell.
make_temp_dir() {
  if [[ -z "${COMMON_TEMP_DIR:-}" ]]; then
    COMMON_TEMP_DIR="$(mktemp -d)"
    trap 'rm -rf -- "${COMMON_TEMP_DIR}"' EXIT
  fi
}

# temp_path <name>: a path inside the run's temporary directory.
temp_path() {
  printf '%s/%s\n' "${COMMON_TEMP_DIR:?make_temp_dir was not called}" "$1"
}

# ---- retries and bounds -----------------------------------------------------

# retry <attempts> <cmd...>: run cmd until it succeeds, sleeping base*2^(n-1)
# plus up to 50% jitter between attempts. The command is logged: no secrets in it.
retry() {
  local attempts="$1" n=1 delay rc
  shift
  while true; do
    rc=0
    "$@" || rc=$?
    if ((rc == 0)); then
      return 0
    fi
    if ((n >= attempts)); then
      log "giving up after ${attempts} attempts (exit ${rc}): $*"
      return "${rc}"
    fi
    delay="$(awk -v b="${RETRY_BASE_SECONDS:-2}" -v n="${n}" -v r="${RANDOM}" \
      -v m="${RETRY_MAX_SECONDS:-60}" \
      'BEGIN { d = b * 2 ^ (n - 1); if (d > m) d = m; printf "%.3f", d + d * (r / 32767) / 2 }')"
    log "attempt ${n}/${attempts} failed (exit ${rc}): $*; retrying in ${delay}s"
    sleep "${delay}"
    n=$((n + 1))
  done
}

# wait_for_cloud_init: cloud-init must be done before apt and config edits.
wait_for_cloud_init() {
  local limit="${CLOUD_INIT_TIMEOUT_SECONDS:-900}" rc=0
  if ! command -v cloud-init >/dev/null 2>&1; then
    log "cloud-init not installed, nothing to wait for"
    return 0
  fi
  timeout -k 10 "${limit}" cloud-init status --wait >/dev/null || rc=$?
  case "${rc}" in
    0) log "cloud-init done" ;;
    # 2: finished with recoverable errors (deprecated keys and the like).
    2) log "cloud-init done with recoverable errors (see /var/log/cloud-init.log)" ;;
    124 | 137) fatal "cloud-init still running after ${limit}s (cloud-init status --wait)" ;;
    *) fatal "cloud-init failed (exit ${rc}); see /var/log/cloud-init-output.log" ;;
  esac
}

# download <url> <dest>: fetch over HTTPS with retries; dest is written only on success.
download() {
  local url="$1" dest="$2"
  retry "${DOWNLOAD_RETRIES:-5}" curl -fsSL --proto =https --connect-timeout 20 --max-time 120 \
    -o "${dest}" "${url}"
}

# ---- apt ----------------------------------------------------------------------

# DEBIAN_FRONTEND covers debconf only. needrestart (installed on Ubuntu 22.04/24.04 server
# images) runs after every install from an apt hook and, in its default interactive mode,
# waits for an answer nobody gives over `sudo bash -s`; NEEDRESTART_MODE=l makes it list
# the services to restart and restart none (the scripts restart what they changed).
apt_get() {
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l apt-get -q -y \
    -o "DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_SECONDS:-600}" \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

apt_update() {
  log "apt-get update"
  retry "${APT_RETRIES:-3}" apt_get update >/dev/null
}

# installed_version <pkg>: the installed version, empty when not installed.
installed_version() {
  local status
  # dpkg-query fails for a package it has never seen: that is "not installed".
  if status="$(dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null)"; then
    awk '$1 == "installed" { print $2 }' <<<"${status}"
  fi
}

# apt_install pkg[=version]...: install what is missing or at another version.
# A version may end in '*' (apt's glob): 1.35.* accepts any 1.35 patch.
# Prints "installed" when it installed something, nothing otherwise.
apt_install() {
  local spec pkg want have todo=()
  for spec in "$@"; do
    pkg="${spec%%=*}"
    want=""
    [[ "${spec}" == *=* ]] && want="${spec#*=}"
    have="$(installed_version "${pkg}")"
    # shellcheck disable=SC2053 # ${want} is matched as a glob on purpose
    if [[ -n "${have}" && (-z "${want}" || "${have}" == ${want}) ]]; then
      continue
    fi
    todo+=("${spec}")
  done
  if ((${#todo[@]} == 0)); then
    log "already installed: ${*}"
    return 0
  fi
  log "installing ${todo[*]}"
  retry "${APT_RETRIES:-3}" apt_get install --no-install-recommends \
    --allow-change-held-packages "${todo[@]}" >&2
  echo installed
}

# apt_install_held VERSION pkg...: install every pkg at VERSION (a glob such as 1.35.* is
# allowed) and hold them, so the pinned versions stay what this script installed.
apt_install_held() {
  local version="$1" pkg specs=()
  shift
  for pkg in "$@"; do
    specs+=("${pkg}=${version}")
  done
  apt_install "${specs[@]}" >/dev/null
  apt_hold "$@"
}

# apt_hold pkg...: hold what is not held yet, so unattended upgrades leave it.
apt_hold() {
  local held pkg todo=()
  held="$(apt-mark showhold)"
  for pkg in "$@"; do
    if ! grep -qxF -- "${pkg}" <<<"${held}"; then
      todo+=("${pkg}")
    fi
  done
  if ((${#todo[@]} > 0)); then
    log "holding ${todo[*]}"
    apt-mark hold "${todo[@]}" >/dev/null
  fi
}

# ---- files, modules, sysctls, services ------------------------------------------

file_hash() {
  if [[ -e "$1" ]]; then
    sha256sum "$1" | awk '{ print $1 }'
  else
    echo absent
  fi
}

# install_file_if_changed <src> <dest> [mode]: replace dest only when the content
# differs. Prints "changed" when it wrote dest, nothing otherwise.
install_file_if_changed() {
  local src="$1" dest="$2" mode="${3:-0644}"
  if [[ "$(file_hash "${src}")" == "$(file_hash "${dest}")" ]]; then
    log "${dest}: no change"
    return 0
  fi
  install -D -m "${mode}" "${src}" "${dest}"
  log "${dest}: updated"
  echo changed
}

# write_file_if_changed <dest> [mode] < content: as above, content on stdin.
write_file_if_changed() {
  local staged
  staged="$(temp_path "staged.$(basename "$1")")"
  cat >"${staged}"
  install_file_if_changed "${staged}" "$@"
}

# restart_if_changed <service> <changed>: restart only when its config changed.
restart_if_changed() {
  if [[ "$2" == changed ]]; then
    log "config changed, restarting $1"
    systemctl restart "$1"
  else
    log "$1: no change, not restarting"
  fi
}

# enable_service <service>: enable and start unless it already is.
enable_service() {
  if systemctl is-enabled --quiet "$1" && systemctl is-active --quiet "$1"; then
    log "$1 already enabled and running"
    return 0
  fi
  systemctl enable --now "$1"
}

module_loaded() {
  lsmod | awk -v m="$1" 'NR > 1 && $1 == m { found = 1 } END { exit !found }'
}

ensure_kernel_module() {
  if module_loaded "$1"; then
    return 0
  fi
  log "loading kernel module $1"
  modprobe "$1"
}

# ensure_sysctl <key> <value>: set it now when it differs (persist in sysctl.d).
ensure_sysctl() {
  local have
  have="$(sysctl -n "$1")"
  if [[ "${have}" != "$2" ]]; then
    log "sysctl $1: ${have} -> $2"
    sysctl -q -w "$1=$2"
  fi
}

# ---- nouveau ------------------------------------------------------------------------

# blocklist_nouveau: keep nouveau off the GPUs from the next boot on (modprobe.d and the
# initramfs, which is rebuilt only when the blocklist changed).
blocklist_nouveau() {
  local changed
  changed="$(write_file_if_changed /etc/modprobe.d/blacklist-nouveau.conf <<'CONF'
# Written by gpu-cluster: the NVIDIA driver needs nouveau unloaded.
blacklist nouveau
options nouveau modeset=0
CONF
)"
  if [[ "${changed}" == changed ]]; then
    log "rebuilding the initramfs without nouveau"
    timeout -k 30 600 update-initramfs -u >&2
  fi
}

# unload_nouveau: true when nouveau is not loaded (any more); false when it is in use.
unload_nouveau() {
  if ! module_loaded nouveau; then
    log "nouveau not loaded"
    return 0
  fi
  log "unloading nouveau"
  modprobe -r nouveau
}

# ---- control plane ----------------------------------------------------------------

# admin_kubectl args...: kubectl as the cluster admin on a control-plane host, each request
# bounded (a later --request-timeout in args wins).
admin_kubectl() {
  kubectl --kubeconfig=/etc/kubernetes/admin.conf --request-timeout=30s "$@"
}

# require_node_name: NODE_NAME is set and a valid Node name (a lowercase DNS name).
require_node_name() {
  require_vars NODE_NAME
  [[ "${NODE_NAME}" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] ||
    fatal "NODE_NAME must be a lowercase DNS name, got '${NODE_NAME}'"
}
