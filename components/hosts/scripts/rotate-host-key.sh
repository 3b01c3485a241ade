#!/usr/bin/env bash
# rotate-host-key.sh: the host half of a machine's first contact, in two phases, each run over
# its own connection (components/hosts/host_keys.py) and each safe to re-run after being cut off
# at any point. The key the machine booted with came in its user data, which others can read
# (EC2's DescribeInstanceAttribute, IMDS): it admits the first contact only.
#   stage   make a new ed25519 host key beside the live one (or keep the one staged before for
#           this same live key) and print its public half. sshd still serves the boot key: a
#           connection cut before the program recorded the new key finds everything as it was.
#   switch  install the staged key as the live one (or find it already live), remove every
#           other host key and cloud-init's copies of the user data, reload sshd, print it.
# The new private key never leaves the host. The public key is printed last on stdout (and to
# the console, for an operator who must pin it by hand). Sent as stdin before the host has its
# scripts, so it stands alone (no lib/common.sh). Needs root (sudo bash -s).
#
# Inputs:
#   PHASE          stage | switch (required)
#   NEW_HOST_KEY   the key the stage printed, which the switch installs (required with PHASE=switch)
set -Eeuo pipefail

SSH_DIR=/etc/ssh
LIVE="${SSH_DIR}/ssh_host_ed25519_key"
# Root's alone; sshd reads none of it (its HostKey files are the ones named ssh_host_*_key).
STAGE_DIR="${SSH_DIR}/gpu-cluster-staged"
STAGED="${STAGE_DIR}/ssh_host_ed25519_key"
# The live public key when the key was staged: a staged key is reused only on that host key
# (a disk cloned from another machine mid-rotation stages anew).
STAGED_FOR="${STAGE_DIR}/staged-for"
# cloud-init's copies of the user data, which hold the boot key's private half.
CLOUD_USER_DATA=(/var/lib/cloud/instance/user-data.txt /var/lib/cloud/instance/user-data.txt.i)
KEY_LINE_RE='^ssh-ed25519 [A-Za-z0-9+/]+={0,2}$'

log() { printf '[host-key] %s\n' "$*" >&2; }
fatal() {
  printf '[host-key] FAILED: %s\n' "$*" >&2
  exit 1
}
trap 'fatal "line ${LINENO}: ${BASH_COMMAND}"' ERR

check_inputs() {
  case "${PHASE:-}" in
    stage) ;;
    switch)
      [[ -n "${NEW_HOST_KEY:-}" ]] || fatal "NEW_HOST_KEY is required with PHASE=switch"
      [[ "${NEW_HOST_KEY}" =~ ${KEY_LINE_RE} ]] ||
        fatal "NEW_HOST_KEY must be one ssh-ed25519 public key line, got '${NEW_HOST_KEY}'"
      ;;
    *) fatal "PHASE must be stage or switch, got '${PHASE:-}'" ;;
  esac
}

# The `type base64` of a public key file, or nothing when there is none.
key_line() {
  if [[ -f "$1" ]]; then
    cut -d' ' -f1,2 "$1"
  fi
}

# Whether a private key file and its .pub hold the same key.
key_pair_whole() {
  local derived
  [[ -f "$1" && -f "$1.pub" ]] || return 1
  derived="$(ssh-keygen -y -f "$1" 2>/dev/null | cut -d' ' -f1,2)" || return 1
  [[ -n "${derived}" && "${derived}" == "$(key_line "$1.pub")" ]]
}

# What a run cut off halfway left: a key half made aside, a file half installed.
remove_leftovers() {
  local leftover
  for leftover in "${SSH_DIR}"/.gpu-cluster-staging.* "${SSH_DIR}"/*.gpu-cluster-new; do
    if [[ -e "${leftover}" ]]; then
      rm -rf "${leftover}"
      log "removed ${leftover}, left by a run that was cut off"
    fi
  done
}

stage() {
  local live staging
  live="$(key_line "${LIVE}.pub")"
  if key_pair_whole "${STAGED}" && [[ -f "${STAGED_FOR}" && "$(<"${STAGED_FOR}")" == "${live}" ]]; then
    log "a new host key is already staged: keeping it"
    return 0
  fi
  # Made aside, then moved into place at once: a cut-off leaves a whole staged key or none.
  staging="$(mktemp -d "${SSH_DIR}/.gpu-cluster-staging.XXXXXX")"
  ssh-keygen -q -t ed25519 -N '' -C '' -f "${staging}/ssh_host_ed25519_key" ||
    fatal "ssh-keygen could not make an ed25519 key in ${staging}"
  printf '%s\n' "${live}" >"${staging}/staged-for"
  chmod 0700 "${staging}"
  rm -rf "${STAGE_DIR}"
  mv "${staging}" "${STAGE_DIR}"
  log "new ed25519 host key staged; sshd still serves the key it booted with"
}

install_staged() {
  local live staged
  live="$(key_line "${LIVE}.pub")"
  if [[ "${live}" == "${NEW_HOST_KEY}" ]] && key_pair_whole "${LIVE}"; then
    log "the new host key is already the live one"
    return 0
  fi
  staged="$(key_line "${STAGED}.pub")"
  if [[ "${staged}" != "${NEW_HOST_KEY}" ]] || ! key_pair_whole "${STAGED}"; then
    fatal "the staged host key is '${staged:-none}', not the one the stage recorded" \
      "(${NEW_HOST_KEY}): run the stage again (pulumi up --replace its <machine>-host-key-rotation)"
  fi
  sshd -t -h "${STAGED}" ||
    fatal "sshd -t refuses the configuration with the staged host key; the live key is unchanged"
  # Each file replaced by a rename: sshd never reads half a key.
  install -m 0600 -o root -g root "${STAGED}" "${LIVE}.gpu-cluster-new"
  install -m 0644 -o root -g root "${STAGED}.pub" "${LIVE}.pub.gpu-cluster-new"
  mv -f "${LIVE}.gpu-cluster-new" "${LIVE}"
  mv -f "${LIVE}.pub.gpu-cluster-new" "${LIVE}.pub"
  log "the staged host key is the live one now"
}

remove_other_keys() {
  local file
  # Every other host key goes (an image's rsa and ecdsa keys too): sshd offers only the new one.
  for file in "${SSH_DIR}"/ssh_host_*_key "${SSH_DIR}"/ssh_host_*_key.pub; do
    if [[ -e "${file}" && "${file}" != "${LIVE}" && "${file}" != "${LIVE}.pub" ]]; then
      rm -f "${file}"
      log "removed ${file}"
    fi
  done
}

forget_boot_key() {
  local copy
  for copy in "${CLOUD_USER_DATA[@]}"; do
    if [[ -f "${copy}" ]]; then
      rm -f "${copy}"
      log "removed ${copy} (it held the boot key)"
    fi
  done
}

reload_sshd() {
  # Always, also when an earlier run installed the key: one cut off before this reload left an
  # OpenSSH 9.8+ sshd serving the key it loaded at start. This session (and any other open
  # one) goes on; new connections get the new key.
  systemctl try-reload-or-restart ssh.service
  log "sshd reloaded"
}

announce() {
  # For an operator who must pin it by hand (hostKeys.<instance id>): the console is read with
  # `aws ec2 get-console-output`, out of band.
  if [[ -w /dev/console ]]; then
    printf 'gpu-cluster host key: %s\n' "$1" >/dev/console
  fi
  printf '%s\n' "$1"
}

switch() {
  install_staged
  remove_other_keys
  forget_boot_key
  reload_sshd
  rm -rf "${STAGE_DIR}"
  announce "$(key_line "${LIVE}.pub")"
}

main() {
  check_inputs
  remove_leftovers
  case "${PHASE}" in
    stage)
      stage
      key_line "${STAGED}.pub"
      ;;
    switch) switch ;;
  esac
}

main "$@"
