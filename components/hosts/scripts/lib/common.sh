# shellcheck shell=bash
# Shared helpers for the node scripts in components/hosts/scripts/.
#
# Functions only: components/hosts/rendering.py renders each script as one program
# (inputs, then this file, then the script body) that runs with `sudo bash -s`.
# A script run from a checkout sources this file itself.
#
# Optional tunables (all have defaults; none is required):
#   RETRY_BASE_SECONDS         first retry delay, doubled per attempt (default 2)
#   RETRY_MAX_SECONDS          cap on a single retry delay (default 60)
#   APT_LOCK_TIMEOUT_SECONDS   how long apt waits for the dpkg lock (default 600)
#   APT_RETRIES                attempts for apt-get update/install (default 3)
#   DPKG_REPAIR_TIMEOUT_SECONDS  bound on `dpkg --configure -a` after an interrupted dpkg
#                              (default 900)
#   CLOUD_INIT_TIMEOUT_SECONDS bound on `cloud-init status --wait` (default 900)
#   DOWNLOAD_RETRIES           attempts for a download (default 5)
#   POLL_SECONDS               pause between two looks at the API server (readyz, a
#                              kubelet's certificate request) while waiting (default 5)
#   SLOT_POLL_SECONDS          pause between two tries for a rolling slot of a pool while all
#                              are held (default 10)

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
  repair_interrupted_dpkg
  DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=l apt-get -q -y \
    -o "DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_SECONDS:-600}" \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

# repair_interrupted_dpkg: finish what a killed dpkg left (a step's timeout in the middle of a
# transaction). Its journal stays in /var/lib/dpkg/updates/, and apt then refuses every install
# with "dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the
# problem." (apt-pkg/deb/debsystem.cc, debSystem::Lock and CheckUpdates: any file there whose
# name is all digits). So this runs what apt asks for, before apt, bounded and retried (dpkg
# waits for no lock: it fails at once while another apt holds it).
repair_interrupted_dpkg() {
  local entry journal=""
  for entry in /var/lib/dpkg/updates/*; do
    if [[ "${entry##*/}" =~ ^[0-9]+$ ]]; then
      journal="${entry}"
      break
    fi
  done
  [[ -n "${journal}" ]] || return 0
  log "dpkg was interrupted (${journal} left behind): running dpkg --configure -a"
  retry "${APT_RETRIES:-3}" timeout -k 30 "${DPKG_REPAIR_TIMEOUT_SECONDS:-900}" \
    env DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold --configure -a >&2
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

# apt_install_together pkg[=version]...: as apt_install, but when anything is missing or at
# another version every spec goes into the one transaction, so apt can move packages that name
# each other's exact revision together instead of refusing half a set.
apt_install_together() {
  local spec want have
  for spec in "$@"; do
    want=""
    [[ "${spec}" == *=* ]] && want="${spec#*=}"
    have="$(installed_version "${spec%%=*}")"
    # shellcheck disable=SC2053 # ${want} is matched as a glob on purpose
    if [[ -z "${have}" || (-n "${want}" && "${have}" != ${want}) ]]; then
      log "installing $*"
      retry "${APT_RETRIES:-3}" apt_get install --no-install-recommends \
        --allow-change-held-packages "$@" >&2
      echo installed
      return 0
    fi
  done
  log "already installed: ${*}"
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

# ---- signed third-party repositories --------------------------------------------------

# primary_key <key file>: "<fingerprint> <expiry>" of the file's primary key, the expiry in
# seconds since the epoch and empty when it never expires (gpg --with-colons: the "pub" record's
# field 7 and the "fpr" record after it, gnupg doc/DETAILS); nothing when it holds no key.
primary_key() {
  { gpg --batch --with-colons --show-keys "$1" 2>/dev/null || :; } |
    awk -F: '$1 == "pub" && !p { p = 1; e = $7 } $1 == "fpr" && p && !f { f = $10 }
      END { if (f != "") print f, e }'
}

# expired <epoch>: true when that moment has passed (empty: never expires).
expired() {
  [[ -n "$1" ]] && (($1 <= $(date +%s)))
}

# fetch_key <url> <fingerprint> <dest>: a publisher's armored key, refused unless its primary
# key is the one the publisher documents (the fingerprint pinned in components/hosts/pins.py)
# and still valid: a key fetched from the server it guards proves nothing by itself, and apt
# verifies nothing with an expired one.
fetch_key() {
  local found="" expires=""
  download "$1" "$3"
  read -r found expires < <(primary_key "$3") || :
  [[ "${found}" == "$2" ]] ||
    fatal "the key at $1 has fingerprint ${found:-none}, $2 expected: not trusting it"
  if expired "${expires}"; then
    fatal "the key at $1 ($2) expired on $(date -u -d "@${expires}" +%F) and no renewed one is" \
      "served: apt cannot verify that repository; see the publisher's notices" \
      "(pkgs.k8s.io: kubernetes/release#3818)"
  fi
}

# keyring_current <keyring> <fingerprint>: the keyring holds that key, not expired. Says why not.
keyring_current() {
  local found="" expires=""
  if [[ ! -s "$1" ]]; then
    return 1
  fi
  read -r found expires < <(primary_key "$1") || :
  if [[ "${found}" != "$2" ]]; then
    log "$1 holds key ${found:-none}, not $2: fetching the key again"
    return 1
  fi
  if expired "${expires}"; then
    log "$1: key $2 expired on $(date -u -d "@${expires}" +%F): fetching it again"
    return 1
  fi
}

# add_signed_apt_repo <name> <key url> <fingerprint> <source> [keyring]: the apt source "deb
# [signed-by=<keyring>] <source>" in sources.list.d/<name>.list, the keyring (default
# /etc/apt/keyrings/<name>.gpg) fetched (fetch_key) when it is missing, holds another key or
# expired (publishers extend a key's expiry: pkgs.k8s.io's did, kubernetes/release#3818);
# apt-get update only when either changed.
add_signed_apt_repo() {
  local name="$1" url="$2" fingerprint="$3" source="$4" key changed_key="" changed_list
  local keyring="${5:-/etc/apt/keyrings/$1.gpg}"
  if ! keyring_current "${keyring}" "${fingerprint}"; then
    key="$(temp_path "${name}.key")"
    fetch_key "${url}" "${fingerprint}" "${key}"
    gpg --batch --yes --dearmor -o "${key}.gpg" "${key}"
    changed_key="$(install_file_if_changed "${key}.gpg" "${keyring}")"
  fi
  changed_list="$(printf 'deb [signed-by=%s] %s\n' "${keyring}" "${source}" |
    write_file_if_changed "/etc/apt/sources.list.d/${name}.list")"
  if [[ "${changed_key}${changed_list}" == *changed* ]]; then
    apt_update
  fi
}

# offered_versions <pkg>: the versions the archive offers, newest first, comma-separated.
offered_versions() {
  apt-cache madison "$1" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }' | paste -sd, -
}

# require_apt_version <pkg> <version> <where from>: fail before installing anything unless the
# archive offers exactly that version (installed counts), naming what it offers instead: a pin
# that stopped resolving is reported as such, never replaced by the newest.
require_apt_version() {
  local offered
  [[ "$(installed_version "$1")" == "$2" ]] && return 0
  offered="$(offered_versions "$1")"
  [[ ",${offered}," == *",$2,"* ]] ||
    fatal "$1 $2 wanted (components/hosts/pins.py), $3 offers ${offered:-no version of it}"
}

# ---- Kubernetes packages ------------------------------------------------------------

KUBE_KEYRING=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
# pkgs.k8s.io's signing key ("isv:kubernetes OBS Project"), one for every minor's repository:
# gpg prints this fingerprint for the Release.key of the v1.24 to v1.31 repositories in
# kubernetes/kubernetes#128609, and kubernetes/release#3818 (the key's expiry, extended since)
# is about that same key.
KUBE_KEY_FINGERPRINT=DE15B14486CD377B9E876E1A234654DA9A296436

# pkgs.k8s.io has one repository per minor: KUBERNETES_MINOR picks it.
repo_url() {
  printf 'https://pkgs.k8s.io/core:/stable:/v%s/deb/\n' "${KUBERNETES_MINOR}"
}

# add_kubernetes_apt_repo: the repository of KUBERNETES_MINOR (replacing another minor's) and
# its signing key, pinned by fingerprint; apt-get update only when either changed.
add_kubernetes_apt_repo() {
  add_signed_apt_repo kubernetes "$(repo_url)Release.key" "${KUBE_KEY_FINGERPRINT}" \
    "$(repo_url) /" "${KUBE_KEYRING}"
}

# ---- TOML -------------------------------------------------------------------------------
#
# TOML is read by a TOML parser, never by a pattern: containerd 2.x prints its config through
# go-toml v2 ('single-quoted' keys and strings, its own order), nvidia-ctk rewrites files through
# go-toml v1 ("double-quoted"), and a person may write either. The parser is Python's tomllib
# (3.11+: Ubuntu 24.04's python3 3.12) or, on Ubuntu 22.04 (python3 3.10, no tomllib), tomli
# from jammy's python3-tomli 1.2.2 (universe), the project tomllib was taken from.

# ensure_toml_parser: python3 can parse TOML (python3-tomli installed where tomllib is missing).
ensure_toml_parser() {
  if python3 -c 'import tomllib' 2>/dev/null || python3 -c 'import tomli' 2>/dev/null; then
    return 0
  fi
  log "python3 has no tomllib (Python < 3.11): installing python3-tomli"
  apt_install python3-tomli >/dev/null
}

# toml_read get <file> <key>...: the value at that key path as JSON ("x", true, 3), empty when
# a key is absent; toml_read canonical <file>: the whole document as sorted, compact JSON (two
# files that mean the same print the same). Fails naming the file when it is not TOML.
toml_read() {
  python3 - "$@" <<'PY'
import json
import sys

try:
    import tomllib
except ModuleNotFoundError:
    import tomli as tomllib

mode, path, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    with open(path, encoding="utf-8") as f:
        value = tomllib.loads(f.read())
except (OSError, tomllib.TOMLDecodeError) as error:
    sys.exit(f"cannot read {path} as TOML: {error}")
if mode == "canonical":
    print(json.dumps(value, sort_keys=True, separators=(",", ":")))
    sys.exit(0)
for key in keys:
    if not isinstance(value, dict) or key not in value:
        sys.exit(0)
    value = value[key]
print(json.dumps(value, sort_keys=True))
PY
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

# ---- nouveau and nova ---------------------------------------------------------------
#
# The open-source drivers that bind NVIDIA GPUs before nvidia can: nouveau, and nova: nova_core
# (Linux 6.15+, drivers/gpu/nova-core) with its DRM driver, built as nova.ko
# (drivers/gpu/drm/nova/Makefile, `obj-$(CONFIG_DRM_NOVA) += nova.o`) and later as nova-drm.ko
# (module nova_drm). Ubuntu 26.04's early 7.0 kernels built nova_core (LP #2150845) and it bound
# Turing, Ampere and Ada GPUs; Canonical's 580-server packages blacklist nova and nova_core
# (nvidia-graphics-drivers debian/templates/nvidia-graphics-drivers.conf.in, LP #2142443), but
# only once they are installed. Listed users first: the DRM drivers hold nova_core.
NVIDIA_RIVALS=(nova_drm nova nova_core nouveau)
NVIDIA_RIVALS_BLOCKLIST=/etc/modprobe.d/blacklist-nouveau.conf

# blocklist_nouveau_and_nova: keep them off the GPUs from the next boot on (modprobe.d, as
# Canonical's file words it, and the initramfs, rebuilt only when the blocklist changed).
blocklist_nouveau_and_nova() {
  local changed
  changed="$(write_file_if_changed "${NVIDIA_RIVALS_BLOCKLIST}" <<'CONF'
# Written by gpu-cluster: the NVIDIA driver needs nouveau and nova unloaded.
blacklist nouveau
options nouveau modeset=0
blacklist nova_core
blacklist nova
blacklist nova_drm
alias nova_core off
alias nova off
alias nova_drm off
CONF
)"
  if [[ "${changed}" == changed ]]; then
    log "rebuilding the initramfs without nouveau and nova"
    timeout -k 30 600 update-initramfs -u >&2
  fi
}

# unload_nouveau_and_nova: unload whichever of them is loaded. True when none is loaded any
# more; false when some are in use, named in RIVALS_IN_USE.
unload_nouveau_and_nova() {
  local module
  RIVALS_IN_USE=()
  for module in "${NVIDIA_RIVALS[@]}"; do
    module_loaded "${module}" || continue
    log "unloading ${module}"
    modprobe -r "${module}" || RIVALS_IN_USE+=("${module}")
  done
  if ((${#RIVALS_IN_USE[@]} > 0)); then
    return 1
  fi
  log "nouveau and nova not loaded"
}

# ---- control plane ----------------------------------------------------------------

# admin_kubectl args...: kubectl as the cluster admin on a control-plane host, each request
# bounded (a later --request-timeout in args wins).
admin_kubectl() {
  kubectl --kubeconfig=/etc/kubernetes/admin.conf --request-timeout=30s "$@"
}

api_answers() {
  [[ "$(admin_kubectl --request-timeout=10s get --raw /readyz 2>/dev/null)" == ok ]]
}

# wait_for_api <seconds>: true once /readyz says ok, false when the time is up.
wait_for_api() {
  local deadline=$((SECONDS + $1))
  until api_answers; do
    if ((SECONDS >= deadline)); then
      return 1
    fi
    sleep "${POLL_SECONDS:-5}"
  done
}

# approve_kubelet_serving_csr <node> <wait seconds>: approve that node's pending kubelet serving
# certificate request (serverTLSBootstrap: true; signer kubernetes.io/kubelet-serving, filed by
# system:node:<node> with the node's own credentials). kube-controller-manager approves only
# client certificates; kubeadm's docs leave serving ones to the cluster operator. Waits up to
# <wait seconds> for the request; without one it says how to approve it later (the API server
# cannot reach that kubelet until then) and carries on.
approve_kubelet_serving_csr() {
  local node=$1 limit=$2 name user signer state approved=""
  local deadline=$((SECONDS + limit))
  while true; do
    while read -r name user signer state; do
      [[ "${signer}" == kubernetes.io/kubelet-serving && "${user}" == "system:node:${node}" ]] ||
        continue
      if [[ -z "${state}" ]]; then
        admin_kubectl certificate approve "${name}" >/dev/null
        log "approved kubelet serving certificate request ${name} of ${node}"
      fi
      approved="${name}"
    done < <(admin_kubectl get csr -o \
      'jsonpath={range .items[*]}{.metadata.name} {.spec.username} {.spec.signerName} {.status.conditions[0].type}{"\n"}{end}')
    [[ -n "${approved}" ]] && return 0
    ((SECONDS >= deadline)) && break
    sleep "${POLL_SECONDS:-5}"
  done
  log "no kubelet serving certificate request of ${node} yet; approve it when it appears:" \
    "kubectl get csr, then kubectl certificate approve <name>"
}

# ---- Kubernetes minor upgrades ---------------------------------------------------------

# minor_of <version>: "v1.35.2" or "1.35" -> "1.35" (empty when it is neither).
minor_of() {
  sed -nE 's/^v?(1\.[0-9]+)(\.[0-9]+.*)?$/\1/p' <<<"$1"
}

# api_server_minor <kubeconfig>: the minor the API server runs (kubectl get --raw /version).
api_server_minor() {
  local body
  body="$(kubectl --kubeconfig="$1" --request-timeout=30s get --raw /version)" ||
    fatal "the API server did not answer 'kubectl get --raw /version' (kubeconfig $1)"
  version_minor_of "${body}"
}

# version_minor_of <body>: the minor of gitVersion ("v1.35.1" -> 1.35) in an API server's
# /version answer, read as the JSON it is (k8s.io/apimachinery pkg/version Info) with python3's
# json module (Ubuntu's cloud images ship python3: cloud-init runs on it); empty when the body is
# not that JSON (a proxy's page) or has no such version.
version_minor_of() {
  python3 -c '
import json, re, sys
try:
    version = json.load(sys.stdin).get("gitVersion")
except (ValueError, AttributeError):
    version = None
match = re.fullmatch(r"v(1\.[0-9]+)\.[0-9]+\S*", version if isinstance(version, str) else "")
print(match.group(1) if match else "")' <<<"$1"
}

# check_one_minor_step <running minor> <what runs it>: KUBERNETES_MINOR may be the running minor
# or the next one: kubeadm upgrades one minor at a time and never downgrades.
check_one_minor_step() {
  local running="${1#1.}" wanted="${KUBERNETES_MINOR#1.}"
  if ((wanted < running)); then
    fatal "gpu-cluster:kubernetesVersion is ${KUBERNETES_MINOR} but $2 runs 1.${running};" \
      "kubeadm does not downgrade: set gpu-cluster:kubernetesVersion to 1.${running}"
  fi
  if ((wanted > running + 1)); then
    fatal "gpu-cluster:kubernetesVersion is ${KUBERNETES_MINOR} but $2 runs 1.${running};" \
      "kubeadm upgrades one minor at a time (skipping one is not supported): set" \
      "gpu-cluster:kubernetesVersion to 1.$((running + 1)), pulumi up, then the next minor"
  fi
}

# upgrade_kubeadm_package: kubeadm of KUBERNETES_MINOR first, from that minor's repository, as
# kubeadm's upgrade procedure orders it (kubelet and kubectl follow after `kubeadm upgrade`).
upgrade_kubeadm_package() {
  add_kubernetes_apt_repo
  apt_install_held "${KUBERNETES_MINOR}.*" kubeadm
  local found
  found="$(kubeadm version -o short)"
  [[ "$(minor_of "${found}")" == "${KUBERNETES_MINOR}" ]] ||
    fatal "kubeadm v${KUBERNETES_MINOR}.x expected after the install, found ${found}"
  log "kubeadm ${found}"
}

# upgrade_kubelet_package: kubelet, kubectl and cri-tools of KUBERNETES_MINOR, then the kubelet
# restarted on them.
upgrade_kubelet_package() {
  apt_install_held "${KUBERNETES_MINOR}.*" kubelet kubectl cri-tools
  systemctl daemon-reload
  systemctl restart kubelet
  log "kubelet restarted on ${KUBERNETES_MINOR}"
}

# ---- reboots ----------------------------------------------------------------------

# schedule_reboot <delay-seconds> <unit>: reboot after this step ends. New SSH connections are
# refused from now on (Ubuntu's ssh units kill only the listener, the running session survives),
# so the next step keeps dialling until sshd is back on the new boot and never lands on this one.
schedule_reboot() {
  local unit
  for unit in ssh.socket ssh.service; do
    if systemctl is-active --quiet "${unit}"; then
      systemctl stop "${unit}"
    fi
  done
  systemd-run --on-active="$1" --unit="$2" systemctl reboot >&2
}

# ---- the kernel moves only with the driver ---------------------------------------------

UNATTENDED_UPGRADES_CONF=/etc/apt/apt.conf.d/51gpu-cluster-kernel-and-driver

# hold_installed <pkg>...: hold those of the packages that are installed.
hold_installed() {
  local pkg installed=()
  for pkg in "$@"; do
    if [[ -n "$(installed_version "${pkg}")" ]]; then
      installed+=("${pkg}")
    fi
  done
  if ((${#installed[@]} > 0)); then
    apt_hold "${installed[@]}"
  fi
}

# keep_kernel_with_the_driver: unattended-upgrades installs no kernel and no NVIDIA package from
# now on (they move together, through the nouveau and driver steps), and the installed kernel
# metapackages are held: a kernel installed without its signed NVIDIA module boots a node with
# no GPUs. (No arguments: the scripts run rendered, without comments, so a shellcheck directive
# at a call cannot answer for a function that reads arguments only some callers pass.)
keep_kernel_with_the_driver() {
  local flavour
  flavour="$(kernel_flavour)"
  hold_installed "linux-${flavour}" "linux-image-${flavour}" "linux-headers-${flavour}"
  # Package-Blacklist entries are regular expressions matched at the start of the name
  # (unattended-upgrades, `is_pkgname_in_blacklist`).
  write_file_if_changed "${UNATTENDED_UPGRADES_CONF}" >/dev/null <<'CONF'
// Written by gpu-cluster: the kernel and the NVIDIA driver move together, through the
// driver step, never through unattended-upgrades.
Unattended-Upgrade::Package-Blacklist {
    "linux-";
    "nvidia-";
    "libnvidia-";
    "libnvsdm";
    "nvlsm";
};
CONF
}

# installed_kernels: the installed kernels of the running kernel's flavour, oldest first
# (6.8.0-1021-aws ...), from their linux-image packages.
installed_kernels() {
  { dpkg-query -W -f='${db:Status-Status} ${Package}\n' \
    "linux-image-[0-9]*-$(kernel_flavour)" 2>/dev/null || :; } |
    awk '$1 == "installed" { sub(/^linux-image-/, "", $2); print $2 }' | sort -V
}

# newest_installed_kernel: the kernel the host boots next (GRUB's default is the newest).
newest_installed_kernel() {
  { uname -r && installed_kernels; } | sort -V | awk 'END { print }'
}

# ---- NVIDIA driver packages (Ubuntu's archive) ----------------------------------------

# nvidia_suffix: 580-server (proprietary kernel modules) or 580-server-open, as in Ubuntu's
# package names (gpu-driver-container `ubuntu24.04/precompiled/nvidia-driver`, `_install_driver`:
# linux-modules-nvidia-${DRIVER_BRANCH}-server-open-${KERNEL_VERSION} for the open modules).
# Needs DRIVER_BRANCH and KERNEL_MODULES (open | proprietary).
nvidia_suffix() {
  if [[ "${KERNEL_MODULES}" == open ]]; then
    printf '%s-server-open\n' "${DRIVER_BRANCH}"
  else
    printf '%s-server\n' "${DRIVER_BRANCH}"
  fi
}

# nvidia_module_package <kernel>: the signed, precompiled module package for one kernel.
nvidia_module_package() {
  printf 'linux-modules-nvidia-%s-%s\n' "$(nvidia_suffix)" "$1"
}

# kernel_flavour: 6.8.0-1021-aws -> aws; 6.8.0-60-generic -> generic.
kernel_flavour() {
  uname -r | cut -d- -f3-
}

# apt_field <pkg[=version]> <field>: a field of the candidate's (or that version's) stanza in
# `apt-cache show`; fails when apt knows no such package.
apt_field() {
  local stanza
  stanza="$(apt-cache show --no-all-versions "$1" 2>/dev/null)" || return 1
  awk -v f="$2" 'BEGIN { FS = ": " } $1 == f { sub(/^[^:]*: /, ""); print; exit }' <<<"${stanza}"
}

# package_depends <pkg>: the Depends: of the installed version (dpkg knows it, also once the
# archive replaced that build), else of the archive's candidate; fails when neither exists.
package_depends() {
  if [[ -n "$(installed_version "$1")" ]]; then
    dpkg-query -W -f='${Depends}' "$1"
  else
    apt_field "$1" Version >/dev/null && apt_field "$1" Depends
  fi
}

# apt_version_for_upstream <pkg> <upstream>: the newest version of pkg the archive has whose
# upstream part is exactly <upstream> (580.95.05 -> 580.95.05-0ubuntu0.24.04.2); empty if none.
apt_version_for_upstream() {
  apt-cache madison "$1" | awk -F'|' -v u="$2" '
    { gsub(/ /, "", $2) } index($2, u "-") == 1 { print $2; exit }'
}

# module_driver_version <module package>: the driver version a signed per-kernel module package
# is built for, X of its "nvidia-kernel-common-<branch>-server (>= X)" (the installed build's,
# else the archive's candidate's); empty when there is none.
module_driver_version() {
  { package_depends "$1" || :; } | tr ',' '\n' |
    sed -nE 's/^ *nvidia-kernel-common-[0-9a-z-]+ \(>= ([^)]+)\).*/\1/p' | awk 'NR == 1'
}

# driver_userspace_packages: the driver's packages besides the module, which install-driver.sh
# pins to the module's driver version (nvidia-headless-no-dkms depends on nvidia-kernel-common
# at exactly its own version: nvidia-graphics-drivers debian/templates/control.in).
driver_userspace_packages() {
  printf '%s\n' "nvidia-kernel-common-${DRIVER_BRANCH}-server" \
    "nvidia-headless-no-dkms-$(nvidia_suffix)" "nvidia-utils-${DRIVER_BRANCH}-server" \
    "libnvidia-decode-${DRIVER_BRANCH}-server" "libnvidia-encode-${DRIVER_BRANCH}-server"
}

# driver_offered <version>: every userspace package of the driver is installed at that upstream
# version or offered at it. Ubuntu's -updates and -security keep only the newest version of each
# package name, while each kernel's module package has a name of its own and stays: a module can
# outlive the userspace it was built for.
driver_offered() {
  local pkg
  while read -r pkg; do
    [[ "$(installed_version "${pkg}")" == "$1-"* || -n "$(apt_version_for_upstream "${pkg}" "$1")" ]] ||
      return 1
  done < <(driver_userspace_packages)
}

# refuse_transitional_branch: fail before downloading anything when Ubuntu turned the branch's
# -server packages into transitional ones that install another branch (on noble, for example,
# an end-of-life branch's nvidia-headless-no-dkms-<branch>-server is a newer branch's version
# that depends on that branch's package): the driver would install, then fail its version check.
refuse_transitional_branch() {
  local pkg version depends target
  pkg="nvidia-headless-no-dkms-$(nvidia_suffix)"
  version="$(apt_field "${pkg}" Version)" ||
    fatal "${pkg} is not in this host's package archive: driver branch ${DRIVER_BRANCH}" \
      "(${KERNEL_MODULES} kernel modules) has no Ubuntu packages for this release"
  if [[ "${version}" == "${DRIVER_BRANCH}."* ]]; then
    log "driver branch ${DRIVER_BRANCH}: ${pkg} ${version}"
    return 0
  fi
  depends="$(apt_field "${pkg}" Depends)"
  target="$(sed -nE 's/.*nvidia-headless-no-dkms-([0-9]+)-server.*/\1/p' <<<"${depends}")"
  fatal "driver branch ${DRIVER_BRANCH} is transitional on this Ubuntu release: ${pkg}" \
    "${version} installs branch ${target:-${version%%.*}} (Depends: ${depends:-none});" \
    "set the pool's driverVersion to ${target:-${version%%.*}}"
}
