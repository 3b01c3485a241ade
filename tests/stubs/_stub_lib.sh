# shellcheck shell=bash
# Shared by the stub commands in this directory (see tests/sandbox.py).
# Every stub records its argv in $STUB_STATE/calls.log (fields separated by \x1f)
# and keeps the state it simulates as small files under $STUB_STATE.
# Stands for the host state the tools share, on Ubuntu 24.04 (22.04 alike): dpkg 1.22's
# database (installed versions; upstream_version splits a Debian version at its last hyphen as
# lib/dpkg/parsehelp.c `parseversion` does, here the first for Ubuntu's versions, which have
# one), apt 2.7's lists (a package of a sources.list.d file is known only after an
# `apt-get update` read that file, apt-pkg/sourcelist.cc), and the publishers' signing keys by
# the fingerprints they document (Docker: docs.docker.com engine/install/ubuntu; NVIDIA CUDA:
# 3bf863cc.pub; AWS EFA: the EC2 user guide), which stub_key_fingerprint returns for their URLs.
set -euo pipefail

: "${STUB_STATE:?STUB_STATE must point at the sandbox state directory}"

stub_record() {
  local line="$1"
  shift
  local arg
  for arg in "$@"; do
    line+=$'\x1f'"${arg}"
  done
  printf '%s\n' "${line}" >>"${STUB_STATE}/calls.log"
}

# state_get <key> [default]
state_get() {
  if [[ -f "${STUB_STATE}/$1" ]]; then
    cat "${STUB_STATE}/$1"
  else
    printf '%s' "${2:-}"
  fi
}

state_set() {
  mkdir -p "$(dirname "${STUB_STATE}/$1")"
  printf '%s' "$2" >"${STUB_STATE}/$1"
}

state_has() {
  [[ -f "${STUB_STATE}/$1" ]]
}

# should_fail <key>: true while the counter in <key> is above zero, counting it down.
should_fail() {
  local left
  left="$(state_get "$1" 0)"
  if ((left > 0)); then
    state_set "$1" "$((left - 1))"
    return 0
  fi
  return 1
}

# past <epoch>: true once the wall clock is at or after <epoch> (a state value a test or a
# stub set: "ready at", an API server that starts answering some seconds from now).
past() {
  awk -v at="$1" -v now="$(date +%s.%N)" 'BEGIN { exit !(now >= at) }'
}

# seconds_from_now <production seconds>: the epoch that many production seconds ahead, on the
# sandbox's clock (state sleep.scale: a test's scaled clock; real seconds without one).
seconds_from_now() {
  awk -v s="$1" -v f="$(state_get sleep.scale 1)" -v now="$(date +%s.%N)" \
    'BEGIN { printf "%.3f", now + s * f }'
}

# installed_version <pkg>: version recorded by the apt-get stub, empty if absent.
installed_version() {
  state_get "dpkg/$1"
}

# installed_like <glob>: true when some installed package name matches the glob.
installed_like() {
  local f
  for f in "${STUB_STATE}"/dpkg/*; do
    # shellcheck disable=SC2053 # glob match on purpose
    if [[ -f "${f}" && "$(basename "${f}")" == $1 ]]; then
      return 0
    fi
  done
  return 1
}

# upstream_version 580.95.05-0ubuntu0.24.04.2 -> 580.95.05
upstream_version() {
  printf '%s\n' "${1%%-*}"
}

# listed <pkg>: apt knows the package: it comes from no particular sources list (state
# apt.source/<pkg> unset), or from one (/etc/apt/sources.list.d/...) that the last `apt-get
# update` read as it is now (state apt.lists-read, written by the apt-get stub).
listed() {
  local source
  source="$(state_get "apt.source/$1")"
  [[ -z "${source}" ]] && return 0
  [[ -f "${source}" ]] || return 1
  grep -qxF "${source} $(md5sum <"${source}" | cut -d' ' -f1)" <<<"$(state_get apt.lists-read)"
}

# stub_key_fingerprint <key file>: its primary key's fingerprint, as the gpg and gpgv stubs
# see it: a line "stub key fingerprint <FPR>" names it; the curl stub's default key ("stub key
# from <url>") has the fingerprint its publisher documents, for the publishers below (the
# scripts pin them, each with its source), another one for any other URL.
stub_key_fingerprint() {
  local text url
  text="$(cat "$1")"
  if grep -q '^stub key fingerprint ' <<<"${text}"; then
    sed -n 's/^stub key fingerprint //p' <<<"${text}" | head -n 1
    return 0
  fi
  url="$(sed -n 's/^stub key from //p' <<<"${text}" | head -n 1)"
  [[ -n "${url}" ]] || return 1
  case "${url}" in
    https://download.docker.com/linux/ubuntu/gpg) echo 9DC858229FC7DD38854AE2D88D81803C0EBFCD88 ;;
    https://developer.download.nvidia.com/compute/cuda/repos/*/3bf863cc.pub)
      echo EB693B3035CD5710E231E123A4B469963BF863CC
      ;;
    https://efa-installer.amazonaws.com/aws-efa-installer.key)
      echo 4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC
      ;;
    https://pkgs.k8s.io/core:/stable:/v*/deb/Release.key)
      echo DE15B14486CD377B9E876E1A234654DA9A296436
      ;;
    https://nvidia.github.io/libnvidia-container/gpgkey)
      echo C95B321B61E88C1809C4F759DDCAE044F796ECB0
      ;;
    *) printf '%s' "${url}" | sha1sum | cut -c1-40 | tr '[:lower:]' '[:upper:]' ;;
  esac
}

# stub_key_expires <key file>: its primary key's expiry (seconds since the epoch), from a line
# "stub key expires <epoch>"; empty (never) without one.
stub_key_expires() {
  sed -n 's/^stub key expires //p' "$1" | head -n 1
}

# depends_of <pkg> <version>: that version's Depends: (state apt.depends/<pkg>=<version>, else
# apt.depends/<pkg>, the field of every version).
depends_of() {
  if state_has "apt.depends/$1=$2"; then
    state_get "apt.depends/$1=$2"
  else
    state_get "apt.depends/$1"
  fi
}

# only_root_mapped: true in the sandbox's unprivileged user namespace (tests/sandbox.py), where
# root is the one user mapped, so no file can be given to any other user or group.
only_root_mapped() {
  local count
  read -r _ _ count </proc/self/uid_map
  ((count == 1))
}

# real_python3: the machine's python3, never a python3 stub in this directory (the stubs' own
# helpers run on it, whatever Python the simulated host has).
real_python3() {
  local stubs
  stubs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  PATH="$(tr ':' '\n' <<<"${PATH}" | grep -vxF "${stubs}" | paste -sd: -)" command -v python3
}

# kubelet_register <JoinConfiguration file>: a kubelet starting on a joined host registers its
# Node when it is not there: in the state directory (_kubelet_register.py), or, with state
# cluster.api (a real API server: the end-to-end tests), in that API server with the kubelet's
# own credentials (_kubeadm_cluster.py, run by the tests' Python, $STUB_PYTHON).
kubelet_register() {
  if state_has cluster.api; then
    "${STUB_PYTHON:?STUB_PYTHON must name the Python of the tests}" \
      "$(dirname "${BASH_SOURCE[0]}")/_kubeadm_cluster.py" register "$1"
  else
    python3 "$(dirname "${BASH_SOURCE[0]}")/_kubelet_register.py" "${STUB_STATE}" <"$1"
  fi
}

# dpkg_lock_held: true while another frontend (unattended-upgrades) holds dpkg's frontend lock,
# /var/lib/dpkg/lock-frontend, which apt-get and dpkg both take: state apt.lock-until (epoch
# seconds), or apt.lock-seconds, turned into apt.lock-until at the first apt-get or dpkg call.
dpkg_lock_held() {
  if state_has apt.lock-seconds; then
    state_set apt.lock-until "$(awk -v s="$(state_get apt.lock-seconds)" -v n="$(date +%s.%N)" \
      'BEGIN { printf "%.3f", n + s }')"
    rm -f "${STUB_STATE}/apt.lock-seconds"
  fi
  ! past "$(state_get apt.lock-until 0)"
}
