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
#   DPKG_LOCK_POLL_SECONDS     pause between two tries of that repair while another package
#                              manager holds dpkg's lock (default 5)
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
# plus up to 50% jitter between attempts; when every attempt failed the step stops, naming the
# command and what to look at (retry_hint). The command is logged: no secrets in it.
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
      fatal "step ${STEP_INDEX:-0}/${STEP_COUNT:-0} (${STEP_TITLE:-setup}): '$*' failed" \
        "${attempts} times (last exit ${rc}); $(retry_hint "$@")"
    fi
    delay="$(awk -v b="${RETRY_BASE_SECONDS:-2}" -v n="${n}" -v r="${RANDOM}" \
      -v m="${RETRY_MAX_SECONDS:-60}" \
      'BEGIN { d = b * 2 ^ (n - 1); if (d > m) d = m; printf "%.3f", d + d * (r / 32767) / 2 }')"
    log "attempt ${n}/${attempts} failed (exit ${rc}): $*; retrying in ${delay}s"
    sleep "${delay}"
    n=$((n + 1))
  done
}

# retry_hint <cmd...>: what to look at when that command keeps failing.
retry_hint() {
  local word
  for word in "$@"; do
    case "${word}" in
      apt_get | apt-get)
        echo "apt's errors are above: check that this host reaches the repositories in" \
          "/etc/apt/sources.list.d and Ubuntu's archive, then pulumi up again"
        return 0
        ;;
      curl)
        echo "check that this host reaches ${*: -1} (its errors are above), then pulumi up again"
        return 0
        ;;
      ctr)
        echo "check that this host reaches the image's registry (ctr's errors are above), then" \
          "pulumi up again"
        return 0
        ;;
    esac
  done
  echo "its errors are above; pulumi up again once their cause is fixed"
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

# dpkg_journal: the first entry of dpkg's journal in /var/lib/dpkg/updates/ (a file whose name is
# all digits), empty when there is none.
dpkg_journal() {
  local entry
  for entry in /var/lib/dpkg/updates/*; do
    if [[ "${entry##*/}" =~ ^[0-9]+$ ]]; then
      printf '%s\n' "${entry}"
      return 0
    fi
  done
}

# repair_interrupted_dpkg: finish what a killed dpkg left (a step's timeout in the middle of a
# transaction). Its journal stays in /var/lib/dpkg/updates/, and apt then refuses every install
# with "dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the
# problem." (apt-pkg/deb/debsystem.cc, debSystem::Lock and CheckUpdates: any file there whose
# name is all digits). So this runs what apt asks for, before apt, bounded. dpkg waits for no
# lock: while another frontend holds it (unattended-upgrades, whose live transaction has a
# journal too) dpkg fails at once ("... lock was locked by another process", lib/dpkg/file.c
# `file_lock`), so the lock is waited for as apt waits for it (DPkg::Lock::Timeout,
# APT_LOCK_TIMEOUT_SECONDS), looking again at the journal, which that frontend may finish
# itself. A repair that fails otherwise (a package's maintainer script) stops the step with
# dpkg's own error.
repair_interrupted_dpkg() {
  local journal out rc limit="${APT_LOCK_TIMEOUT_SECONDS:-600}" deadline
  deadline=$((SECONDS + limit))
  while journal="$(dpkg_journal)" && [[ -n "${journal}" ]]; do
    log "dpkg was interrupted (${journal} left behind): running dpkg --configure -a"
    rc=0
    out="$(timeout -k 30 "${DPKG_REPAIR_TIMEOUT_SECONDS:-900}" env DEBIAN_FRONTEND=noninteractive \
      dpkg --force-confdef --force-confold --configure -a 2>&1)" || rc=$?
    printf '%s\n' "${out}" >&2
    if ((rc == 0)); then
      return 0
    fi
    if [[ "${out}" == *"lock was locked by another process"* ]] && ((SECONDS < deadline)); then
      log "another package manager holds dpkg's lock: waiting for it (at most ${limit}s)"
      sleep "${DPKG_LOCK_POLL_SECONDS:-5}"
      continue
    fi
    fatal "dpkg --configure -a failed (exit ${rc}) finishing an interrupted dpkg:" \
      "$({ grep -m 2 -A 1 -E '^dpkg: error' <<<"${out}" || :; } | paste -sd ' ' -)." \
      "Fix what dpkg reports above on this host (or wait for the package manager holding its" \
      "lock), run 'sudo dpkg --configure -a' until it succeeds, then pulumi up again"
  done
}

# apt_update [attempts]: refresh the package lists, retried; any index that failed to download
# fails it. Without --error-on=any apt-get exits 0 after a transient network failure ("W: Failed
# to fetch ...", "W: Some index files failed to download. They have been ignored, or old ones
# used instead.": apt-pkg/update.cc `AcquireUpdate`, ErrorMode::Persistent), and a repository
# added on this run would have no lists at all. The option exists from apt 2.1.16 on (apt-get(8),
# --error-on=any; apt-private/private-cmndline.cc of apt 2.4.13 and 2.7.14, Ubuntu 22.04's and
# 24.04's). A success settles the update a changed sources list or keyring owes (APT_UPDATE_OWED).
apt_update() {
  log "apt-get update"
  retry "${1:-${APT_RETRIES:-3}}" apt_get update --error-on=any >/dev/null
  settle "${APT_UPDATE_OWED}"
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

# renew_keyring <name> <key url> <fingerprint> <keyring>: the keyring fetched again (fetch_key)
# when it is missing, holds another key or expired (publishers extend a key's expiry:
# pkgs.k8s.io's did, kubernetes/release#3818); a new one owes an apt-get update.
renew_keyring() {
  local key
  keyring_current "$4" "$3" && return 0
  key="$(temp_path "$1.key")"
  fetch_key "$2" "$3" "${key}"
  gpg --batch --yes --dearmor -o "${key}.gpg" "${key}"
  install_file_owing "${key}.gpg" "$4" "${APT_UPDATE_OWED}"
}

# add_signed_apt_repo <name> <key url> <fingerprint> <source> [keyring]: the apt source "deb
# [signed-by=<keyring>] <source>" in sources.list.d/<name>.list, its keyring (default
# /etc/apt/keyrings/<name>.gpg) current (renew_keyring); apt-get update when either changed, on
# this run or on one that ended before its update succeeded (the change owes it,
# APT_UPDATE_OWED: the files alone no longer say so).
add_signed_apt_repo() {
  local name="$1" source="$4" list
  local keyring="${5:-/etc/apt/keyrings/$1.gpg}"
  renew_keyring "${name}" "$2" "$3" "${keyring}"
  list="$(temp_path "${name}.list")"
  printf 'deb [signed-by=%s] %s\n' "${keyring}" "${source}" >"${list}"
  install_file_owing "${list}" "/etc/apt/sources.list.d/${name}.list" "${APT_UPDATE_OWED}"
  if owed "${APT_UPDATE_OWED}"; then
    apt_update
  fi
}

# Docker's signing key as docs.docker.com/engine/install/ubuntu/ documents it.
DOCKER_KEY_URL=https://download.docker.com/linux/ubuntu/gpg
DOCKER_KEY_FINGERPRINT=9DC858229FC7DD38854AE2D88D81803C0EBFCD88
NVIDIA_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
# NVIDIA's container toolkit repository key, "NVIDIA CORPORATION (Open Source Projects)
# <cudatools@nvidia.com>": the fingerprint NVIDIA's maintainers quote for that gpgkey
# (NVIDIA/libnvidia-container#109: "The key wasn't changed, but it did expire";
# NVIDIA/libnvidia-container#171: "The key is the correct one").
NVIDIA_KEY_FINGERPRINT=C95B321B61E88C1809C4F759DDCAE044F796ECB0
# NVIDIA's CUDA repository signing key (3bf863cc), by the fingerprint NVIDIA publishes it with.
CUDA_KEY_FINGERPRINT=EB693B3035CD5710E231E123A4B469963BF863CC

# pinned_key <list name> <the list's URI>: "<key url> <fingerprint>" of a repository the steps
# add with add_signed_apt_repo; nothing for any other list.
pinned_key() {
  case "$1" in
    docker) echo "${DOCKER_KEY_URL} ${DOCKER_KEY_FINGERPRINT}" ;;
    nvidia-container-toolkit) echo "${NVIDIA_KEY_URL} ${NVIDIA_KEY_FINGERPRINT}" ;;
    kubernetes) echo "${2}Release.key ${KUBE_KEY_FINGERPRINT}" ;;
    cuda) echo "${2}3bf863cc.pub ${CUDA_KEY_FINGERPRINT}" ;;
  esac
}

# renew_pinned_keyrings: the keyring of every repository an earlier run (or the image) added,
# renewed before anything runs apt-get update. apt refuses a repository whose Release is signed
# by a key the keyring holds only expired ("The repository '...' is not signed", exit 100) when
# the host has no earlier Release of it (lists cleaned, a host booted from an image), so the
# first update of a run would fail before the step that adds the repository could renew it.
renew_pinned_keyrings() {
  local list name keyring uri url fingerprint
  for list in /etc/apt/sources.list.d/{docker,nvidia-container-toolkit,kubernetes,cuda}.list; do
    [[ -f "${list}" ]] || continue
    name="${list##*/}"
    name="${name%.list}"
    # The one line add_signed_apt_repo writes: deb [signed-by=<keyring>] <uri> <suite...>
    read -r keyring uri < <(sed -nE 's/^deb \[signed-by=([^] ]+)\] ([^ ]+) .*/\1 \2/p' "${list}") ||
      continue
    read -r url fingerprint < <(pinned_key "${name}" "${uri}")
    renew_keyring "${name}" "${url}" "${fingerprint}" "${keyring}"
  done
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

# ---- actions a change owes -------------------------------------------------------------
#
# A change that calls for an action (a restart, an apt-get update, a rebuild) is recorded as
# owing it before the change is made, and the record goes only once the action succeeded: a run
# killed in between (a step's timeout, a failed action) leaves the record, and the next run,
# which finds the files already as it wants them, still acts.

# An action named <name>@boot (a restart, a module reload) is owed until it succeeded or the
# host rebooted, which does it too: its record holds the boot it was owed in.
# (OWED_DIR from the environment: the real-apt tests keep it inside their root.)
OWED_DIR="${OWED_DIR:-/var/lib/gpu-cluster/owed}"
APT_UPDATE_OWED=apt-get-update
BOOT_ID=/proc/sys/kernel/random/boot_id

# owe <action>: record that <action> is owed.
owe() {
  mkdir -p "${OWED_DIR}"
  if [[ "$1" == *@boot ]]; then
    cat "${BOOT_ID}" >"${OWED_DIR}/$1"
  else
    : >"${OWED_DIR}/$1"
  fi
}

# owed <action>: true while <action> is owed.
owed() {
  local boot
  [[ -e "${OWED_DIR}/$1" ]] || return 1
  [[ "$1" == *@boot ]] || return 0
  read -r boot <"${OWED_DIR}/$1" || return 1
  [[ "${boot}" == "$(cat "${BOOT_ID}")" ]]
}

# settle <action>: <action> succeeded: nothing is owed any more.
settle() {
  rm -f -- "${OWED_DIR}/$1"
}

# install_file_owing <src> <dest> <action> [mode]: as install_file_if_changed, but a change owes
# <action>, recorded before dest is written.
install_file_owing() {
  if [[ "$(file_hash "$1")" != "$(file_hash "$2")" ]]; then
    owe "$3"
  fi
  install_file_if_changed "$1" "$2" "${@:4}" >/dev/null
}

# write_file_owing <dest> <action> [mode] < content: as install_file_owing, content on stdin.
write_file_owing() {
  local staged
  staged="$(temp_path "staged.$(basename "$1")")"
  cat >"${staged}"
  install_file_owing "${staged}" "$@"
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
# A reboot does not rebuild the initramfs: owed across boots.
INITRAMFS_OWED=update-initramfs

# blocklist_nouveau_and_nova: keep them off the GPUs from the next boot on (modprobe.d, as
# Canonical's file words it, and the initramfs, rebuilt when the blocklist changed, on this run
# or on one that ended before the rebuild succeeded).
blocklist_nouveau_and_nova() {
  write_file_owing "${NVIDIA_RIVALS_BLOCKLIST}" "${INITRAMFS_OWED}" <<'CONF'
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
  if owed "${INITRAMFS_OWED}"; then
    log "rebuilding the initramfs without nouveau and nova"
    timeout -k 30 600 update-initramfs -u >&2
    settle "${INITRAMFS_OWED}"
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

# The fields of each certificate signing request the approvers read, separated by the unit
# separator (no field holds it; a tab would collapse an empty field): name, requester, signer,
# usages (each followed by a comma), the request (base64 PEM), and the first condition (empty
# while pending).
CSR_FIELD_SEPARATOR=$'\x1f'
CSR_FIELDS='jsonpath={range .items[*]}{.metadata.name}{"\u001f"}{.spec.username}{"\u001f"}{.spec.signerName}{"\u001f"}{range .spec.usages[*]}{@}{","}{end}{"\u001f"}{.spec.request}{"\u001f"}{.status.conditions[0].type}{"\n"}{end}'

# kubelet_serving_problem <node> <usages> <request> <allowed name>...: prints nothing when the
# request (spec.request: base64 of a PEM PKCS#10 request) is <node>'s kubelet asking for a
# serving certificate for names the program knows it by, else why not, on one line.
# Kubernetes' rules for the kubelet-serving signer (pkg/apis/certificates/v1/helpers.go,
# ValidateKubeletServingCSR: organization exactly system:nodes, common name system:node:*, a DNS
# or IP subject alternative name and no other kind, usages digital signature and server auth,
# plus key encipherment for an RSA key), narrowed to <node>: common name system:node:<node>,
# and every alternative name one of <allowed> ("DNS:<name>" or "IP Address:<address>", as
# `openssl req -text` prints each: OpenSSL crypto/x509/v3_san.c, i2v_GENERAL_NAME). The request
# is read with openssl (3.0, Ubuntu 22.04 and 24.04): its signature must verify, its subject
# must print exactly as the one name, and its text must hold exactly the one extension on one
# line (a name with a newline in it would otherwise hide a second name on a line of its own).
kubelet_serving_problem() {
  local node=$1 usages=$2 request=$3 dir sorted subject entry known
  local -a text entries
  shift 3
  sorted="$(tr ',' '\n' <<<"${usages}" | sed '/^$/d' | LC_ALL=C sort | paste -sd, -)"
  case "${sorted}" in
    "digital signature,server auth" | "digital signature,key encipherment,server auth") ;;
    *)
      echo "usages '${usages%,}' are not those of a serving certificate (digital signature and" \
        "server auth, with key encipherment for an RSA key)"
      return 0
      ;;
  esac
  dir="$(mktemp -d)"
  if ! base64 -d <<<"${request}" >"${dir}/request.pem" 2>/dev/null ||
    ! openssl req -in "${dir}/request.pem" -noout -verify >/dev/null 2>&1; then
    rm -rf -- "${dir}"
    echo "spec.request is not a PEM certificate request whose signature verifies"
    return 0
  fi
  subject="$(openssl req -in "${dir}/request.pem" -noout -subject -nameopt RFC2253)"
  mapfile -t text < <(openssl req -in "${dir}/request.pem" -noout -text \
    -reqopt no_header,no_version,no_subject,no_pubkey,no_sigdump,no_signame)
  rm -rf -- "${dir}"
  if [[ "${subject}" != "subject=CN=system:node:${node},O=system:nodes" ]]; then
    echo "its subject is '${subject#subject=}', not CN=system:node:${node},O=system:nodes"
    return 0
  fi
  if ((${#text[@]} != 4)) || [[ "$(printf '%s|' "${text[@]:0:3}" | tr -s ' ')" != \
    " Attributes:| Requested Extensions:| X509v3 Subject Alternative Name: |" ]]; then
    echo "it requests other extensions than one list of subject alternative names:" \
      "$(printf '%s / ' "${text[@]}" | tr -s ' ')"
    return 0
  fi
  IFS=, read -r -a entries <<<"${text[3]}"
  if ((${#entries[@]} == 0)); then
    echo "it names no subject alternative name"
    return 0
  fi
  for entry in "${entries[@]}"; do
    entry="${entry#"${entry%%[! ]*}"}"
    for known in "$@"; do
      [[ "${entry}" == "${known}" ]] && continue 2
    done
    echo "it names ${entry}, which is not ${node}'s (it may name: $*)"
    return 0
  done
}

# require_serving_names: SERVING_NAMES is one name a line, each "DNS:<lowercase DNS name>" or
# "IP Address:<IPv4 address>", the form `kubelet_serving_problem` compares.
require_serving_names() {
  local name
  while read -r name; do
    [[ "${name}" =~ ^DNS:[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ||
      "${name}" =~ ^IP\ Address:[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] ||
      fatal "SERVING_NAMES: '${name}' is not 'DNS:<name>' or 'IP Address:<IPv4 address>'"
  done <<<"${SERVING_NAMES}"
}

# approve_kubelet_serving_csr <node> <wait seconds> <allowed name>...: approve that node's
# pending kubelet serving certificate request (serverTLSBootstrap: true; signer
# kubernetes.io/kubelet-serving, filed by system:node:<node> with the node's own credentials)
# when it asks for the names the program knows the node by (`kubelet_serving_problem`), else
# leave it pending and say why. kube-controller-manager approves only client certificates;
# kubeadm's docs leave serving ones to the cluster operator. Waits up to <wait seconds> for the
# request; without one it says how to approve it later (the API server cannot reach that kubelet
# until then) and carries on.
approve_kubelet_serving_csr() {
  local node=$1 limit=$2 name user signer usages request state problem approved=""
  shift 2
  local deadline=$((SECONDS + limit))
  while true; do
    while IFS="${CSR_FIELD_SEPARATOR}" read -r name user signer usages request state; do
      [[ "${signer}" == kubernetes.io/kubelet-serving && "${user}" == "system:node:${node}" ]] ||
        continue
      if [[ -z "${state}" ]]; then
        problem="$(kubelet_serving_problem "${node}" "${usages}" "${request}" "$@")"
        if [[ -n "${problem}" ]]; then
          log "not approving kubelet serving certificate request ${name} of ${node}, it stays" \
            "pending: ${problem}"
          continue
        fi
        admin_kubectl certificate approve "${name}" >/dev/null
        log "approved kubelet serving certificate request ${name} of ${node}"
      fi
      approved="${name}"
    done < <(admin_kubectl get csr -o "${CSR_FIELDS}")
    [[ -n "${approved}" ]] && return 0
    ((SECONDS >= deadline)) && break
    sleep "${POLL_SECONDS:-5}"
  done
  log "no kubelet serving certificate request of ${node} for its own names yet; approve it" \
    "when it appears: kubectl get csr, then kubectl certificate approve <name>"
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
# A host that has the branch already (its headless package, or the running kernel's module) is
# left alone: its driver stays what it is, held, whatever the archive turned the name into.
refuse_transitional_branch() {
  local pkg version depends target module
  pkg="nvidia-headless-no-dkms-$(nvidia_suffix)"
  version="$(installed_version "${pkg}")"
  if [[ "${version}" == "${DRIVER_BRANCH}."* ]]; then
    log "driver branch ${DRIVER_BRANCH}: ${pkg} ${version} installed"
    return 0
  fi
  module="$(nvidia_module_package "$(uname -r)")"
  version="$(installed_version "${module}")"
  if [[ -n "${version}" ]]; then
    log "driver branch ${DRIVER_BRANCH}: ${module} ${version} installed"
    return 0
  fi
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
