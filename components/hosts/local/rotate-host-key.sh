#!/usr/bin/env bash
# rotate-host-key.sh (local): dial a machine the stack created, checking the host key it booted
# with and nothing else, and run on it the program on stdin (scripts/rotate-host-key.sh), which
# replaces that key and prints the new one. Runs where `pulumi up` runs (a pulumi-command local
# Command), so that its update re-dials nothing: the boot key is never accepted again.
#
# Inputs (environment):
#   SSH_HOST SSH_PORT SSH_USER   the machine, as every step reaches it (required)
#   SSH_PRIVATE_KEY              the login key (required; written to a 0600 file, then removed)
#   BOOT_HOST_KEY                the public host key the machine booted with (required)
#   PROXY_HOST PROXY_PORT PROXY_USER PROXY_HOST_KEY   the bastion, when one relays (all or none)
#   DIAL_SECONDS                 how long to wait for sshd on a fresh machine (default 1500)
set -Eeuo pipefail

log() { printf '[host-key] %s\n' "$*" >&2; }
fatal() {
  printf '[host-key] FAILED: %s\n' "$*" >&2
  exit 1
}

check_inputs() {
  local name
  for name in SSH_HOST SSH_PORT SSH_USER SSH_PRIVATE_KEY BOOT_HOST_KEY; do
    [[ -n "${!name:-}" ]] || fatal "${name} is required"
  done
  [[ "${BOOT_HOST_KEY}" =~ ^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521))\ [A-Za-z0-9+/=]+$ ]] ||
    fatal "BOOT_HOST_KEY must be one ED25519 or ECDSA public key line, got '${BOOT_HOST_KEY}'"
  if [[ -n "${PROXY_HOST:-}" ]]; then
    [[ -n "${PROXY_HOST_KEY:-}" ]] || fatal "PROXY_HOST_KEY is required with PROXY_HOST"
  fi
}

write_files() {
  WORK="$(mktemp -d)"
  trap 'rm -rf "${WORK}"' EXIT
  (umask 077 && printf '%s\n' "${SSH_PRIVATE_KEY}" >"${WORK}/key")
  printf 'gpu-cluster-host %s\n' "${BOOT_HOST_KEY}" >"${WORK}/known_hosts"
  if [[ -n "${PROXY_HOST:-}" ]]; then
    printf 'gpu-cluster-bastion %s\n' "${PROXY_HOST_KEY}" >"${WORK}/bastion_known_hosts"
  fi
}

# The options every hop uses: this key only, this known_hosts only, nothing asked, nothing added.
pinned_options() {
  local alias="$1" known="$2"
  printf '%s\n' -F /dev/null -i "${WORK}/key" -o IdentitiesOnly=yes -o BatchMode=yes \
    -o StrictHostKeyChecking=yes -o "UserKnownHostsFile=${known}" \
    -o GlobalKnownHostsFile=/dev/null -o "HostKeyAlias=${alias}" -o ConnectTimeout=30 \
    -o UpdateHostKeys=no
}

ssh_command() {
  local -a options
  mapfile -t options < <(pinned_options gpu-cluster-host "${WORK}/known_hosts")
  if [[ -n "${PROXY_HOST:-}" ]]; then
    local -a hop
    mapfile -t hop < <(pinned_options gpu-cluster-bastion "${WORK}/bastion_known_hosts")
    options+=(-o "ProxyCommand=ssh ${hop[*]} -p ${PROXY_PORT:-22} -W %h:%p ${PROXY_USER}@${PROXY_HOST}")
  fi
  SSH=(ssh "${options[@]}" -p "${SSH_PORT}" "${SSH_USER}@${SSH_HOST}" 'sudo timeout -k 30 300 bash -s')
}

# A fresh machine refuses connections for minutes; a host key that is not the boot key is
# never retried: it is someone else, or a machine whose key was already rotated.
rotate() {
  local program deadline status output
  program="$(cat)"
  deadline=$((SECONDS + ${DIAL_SECONDS:-1500}))
  while :; do
    status=0
    output="$("${SSH[@]}" <<<"${program}" 2>"${WORK}/stderr")" || status=$?
    if ((status == 0)); then
      printf '%s\n' "${output}" | tail -n 1
      return 0
    fi
    if grep -q -e 'REMOTE HOST IDENTIFICATION HAS CHANGED' -e 'Host key verification failed' \
      "${WORK}/stderr"; then
      fatal "${SSH_HOST} did not present the host key it booted with: not dialling it again." \
        "If its key was already rotated, read the new one from its console" \
        "(aws ec2 get-console-output: 'gpu-cluster host key:') and set hostKeys.<instance id>"
    fi
    if ((status != 255)) || ((SECONDS >= deadline)); then
      fatal "rotating the host key of ${SSH_HOST} failed (exit ${status}): $(tail -n 3 "${WORK}/stderr")"
    fi
    log "${SSH_HOST} not reachable yet; retrying"
    sleep 10
  done
}

check_inputs
write_files
ssh_command
rotate
