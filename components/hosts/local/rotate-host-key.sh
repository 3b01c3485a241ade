#!/usr/bin/env bash
# rotate-host-key.sh (local): one phase of a machine's first contact, run where `pulumi up` runs
# (a pulumi-command local Command, components/hosts/host_keys.py): dial the machine accepting
# only the host keys it may present now, run there the host program that follows the inputs
# (scripts/rotate-host-key.sh, one phase), and print the key it printed. With VERIFY_HOST_KEY,
# dial once more accepting that key alone before printing it: the key every later step pins is
# one the machine was seen to serve.
#
# Started with a clean environment (`env -i PATH=...`): pulumi-command starts a local command
# with its own environment (local/commandOutputs.go `run`: `cmd.Env = os.Environ()`), which holds
# the deploy job's AWS and Pulumi credentials; none of them reaches this script or ssh. No input
# reaches a shell as code: they arrive on stdin as data, ssh gets them as arguments, and the
# bastion hop is this same script (`--hop`), reading them from its environment.
#
# Inputs (stdin: NAME=value lines, then a line `---`, then the host program):
#   MACHINE                      the machine and its instance id, for messages (required)
#   SSH_HOST SSH_PORT SSH_USER   how every step reaches it (required)
#   LOGIN_KEY                    the login key, base64 (required; into a 0600 file, removed on exit)
#   HOST_KEY                     a host key the machine may present on this dial (required; one
#                                line each, repeatable)
#   VERIFY_HOST_KEY              after the program, dial again accepting this key alone (optional)
#   PROXY_HOST PROXY_PORT PROXY_USER PROXY_HOST_KEY   the bastion, when one relays (all or none)
#   DIAL_SECONDS                 how long to wait for sshd on a fresh machine (default 1500)
set -Eeuo pipefail

END_OF_INPUTS=---
KEY_LINE_RE='^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,2}$'
HOST_KEYS=()

log() { printf '[host-key] %s\n' "$*" >&2; }
fatal() {
  printf '[host-key] FAILED: %s\n' "$*" >&2
  exit 1
}

read_inputs() {
  local line name value
  while IFS= read -r line; do
    if [[ "${line}" == "${END_OF_INPUTS}" ]]; then
      PROGRAM="$(cat)"
      return 0
    fi
    name="${line%%=*}"
    value="${line#*=}"
    case "${name}" in
      MACHINE | SSH_HOST | SSH_PORT | SSH_USER | LOGIN_KEY | VERIFY_HOST_KEY | PROXY_HOST | \
        PROXY_PORT | PROXY_USER | PROXY_HOST_KEY | DIAL_SECONDS)
        printf -v "${name}" '%s' "${value}"
        ;;
      HOST_KEY) HOST_KEYS+=("${value}") ;;
      *) fatal "unknown input '${name}' on stdin" ;;
    esac
  done
  fatal "stdin ended before the line '${END_OF_INPUTS}' that ends the inputs"
}

check_inputs() {
  local name key
  for name in MACHINE SSH_HOST SSH_PORT SSH_USER LOGIN_KEY; do
    [[ -n "${!name:-}" ]] || fatal "${name} is required"
  done
  ((${#HOST_KEYS[@]})) || fatal "HOST_KEY is required: no host key to accept, no dial"
  for key in "${HOST_KEYS[@]}" ${VERIFY_HOST_KEY:+"${VERIFY_HOST_KEY}"}; do
    [[ "${key}" =~ ${KEY_LINE_RE} ]] ||
      fatal "a host key must be one ED25519 or ECDSA public key line, got '${key}'"
  done
  [[ "${SSH_PORT}" =~ ^[0-9]{1,5}$ ]] || fatal "SSH_PORT must be a port number, got '${SSH_PORT}'"
  [[ "${DIAL_SECONDS:=1500}" =~ ^[0-9]+$ ]] || fatal "DIAL_SECONDS must be a number of seconds"
  if [[ -n "${PROXY_HOST:-}" ]]; then
    for name in PROXY_PORT PROXY_USER PROXY_HOST_KEY; do
      [[ -n "${!name:-}" ]] || fatal "${name} is required with PROXY_HOST"
    done
    [[ "${PROXY_HOST_KEY}" =~ ${KEY_LINE_RE} ]] ||
      fatal "PROXY_HOST_KEY must be one ED25519 or ECDSA public key line"
  fi
}

write_files() {
  local key
  WORK="$(mktemp -d)"
  trap 'rm -rf "${WORK}"' EXIT
  (umask 077 && printf '%s' "${LOGIN_KEY}" | base64 -d >"${WORK}/key") ||
    fatal "LOGIN_KEY is not base64"
  for key in "${HOST_KEYS[@]}"; do
    printf 'gpu-cluster-host %s\n' "${key}"
  done >"${WORK}/known_hosts"
  if [[ -n "${VERIFY_HOST_KEY:-}" ]]; then
    printf 'gpu-cluster-host %s\n' "${VERIFY_HOST_KEY}" >"${WORK}/verify_known_hosts"
  fi
  if [[ -n "${PROXY_HOST:-}" ]]; then
    printf 'gpu-cluster-bastion %s\n' "${PROXY_HOST_KEY}" >"${WORK}/bastion_known_hosts"
  fi
}

# The options every hop uses: this key only, this known_hosts only, nothing asked, nothing added.
pinned_options() {
  local alias="$1" known="$2"
  printf '%s\n' -F /dev/null -i "${WORK}/key" -o IdentitiesOnly=yes -o IdentityAgent=none \
    -o BatchMode=yes -o StrictHostKeyChecking=yes -o "UserKnownHostsFile=${known}" \
    -o GlobalKnownHostsFile=/dev/null -o "HostKeyAlias=${alias}" -o ConnectTimeout=30 \
    -o UpdateHostKeys=no
}

# A string as one word for /bin/sh, which runs ssh's ProxyCommand (sshconnect.c
# `ssh_proxy_connect`: `$SHELL -c "exec <ProxyCommand>"`), after ssh's own %-expansion.
sh_word() {
  local quoted="'${1//\'/\'\\\'\'}'"
  printf '%s' "${quoted//%/%%}"
}

# The bastion hop (`ssh -W`), as ssh starts it for the main connection: every value from the
# environment, as arguments; nothing of them in the ProxyCommand line.
hop() {
  local -a options
  mapfile -t options < <(pinned_options gpu-cluster-bastion "${WORK}/bastion_known_hosts")
  exec ssh "${options[@]}" -p "${PROXY_PORT}" -l "${PROXY_USER}" \
    -W "[${SSH_HOST}]:${SSH_PORT}" -- "${PROXY_HOST}"
}

# ssh to the machine accepting the keys in known_hosts file $1, running $2 there.
ssh_to_machine() {
  local known="$1" remote="$2" self
  local -a options
  mapfile -t options < <(pinned_options gpu-cluster-host "${known}")
  if [[ -n "${PROXY_HOST:-}" ]]; then
    self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
    options+=(-o "ProxyCommand=bash $(sh_word "${self}") --hop")
  fi
  ssh "${options[@]}" -p "${SSH_PORT}" -l "${SSH_USER}" -- "${SSH_HOST}" "${remote}"
}

# Dial until sshd answers (a fresh machine refuses connections for minutes), then run $2 with
# stdin $3, accepting the keys of known_hosts file $1. A host key that is not accepted is never
# retried: it is someone else, or a machine whose key moved on.
dial() {
  local known="$1" remote="$2" input="$3" deadline status
  deadline=$((SECONDS + DIAL_SECONDS))
  while :; do
    status=0
    OUTPUT="$(ssh_to_machine "${known}" "${remote}" <<<"${input}" 2>"${WORK}/stderr")" || status=$?
    if ((status == 0)); then
      return 0
    fi
    if grep -q -e 'REMOTE HOST IDENTIFICATION HAS CHANGED' -e 'Host key verification failed' \
      "${WORK}/stderr"; then
      if grep -q 'gpu-cluster-bastion' "${WORK}/stderr"; then
        fatal "the bastion ${PROXY_HOST} did not present network.bastion.hostKey"
      fi
      return 2
    fi
    if ((status != 255)) || ((SECONDS >= deadline)); then
      fatal "${MACHINE} (${SSH_HOST}) failed (exit ${status}): $(tail -n 5 "${WORK}/stderr")"
    fi
    log "${MACHINE} (${SSH_HOST}) not reachable yet; retrying"
    sleep 10
  done
}

run_program() {
  local printed status=0
  dial "${WORK}/known_hosts" 'sudo timeout -k 30 300 bash -s' "${PROGRAM}" || status=$?
  if ((status == 2)); then
    fatal "${MACHINE} (${SSH_HOST}) presented none of the host keys it may have now:" \
      "${HOST_KEYS[*]}. If its key was switched by a first contact whose record is lost," \
      "read the key it serves from its console (aws ec2 get-console-output, the line" \
      "'gpu-cluster host key:') and set gpu-cluster:hostKeys.<instance id> to it"
  fi
  printed="$(printf '%s\n' "${OUTPUT}" | tail -n 1)"
  [[ "${printed}" =~ ${KEY_LINE_RE} ]] ||
    fatal "${MACHINE} printed no host key as its last line: '${printed}'"
  KEY="${printed}"
}

verify() {
  local status=0
  [[ -n "${VERIFY_HOST_KEY:-}" ]] || return 0
  [[ "${KEY}" == "${VERIFY_HOST_KEY}" ]] ||
    fatal "${MACHINE} printed ${KEY}, not the key its switch installs (${VERIFY_HOST_KEY})"
  dial "${WORK}/verify_known_hosts" true "" || status=$?
  if ((status == 2)); then
    fatal "${MACHINE} (${SSH_HOST}) does not serve ${VERIFY_HOST_KEY} after its switch"
  fi
  log "${MACHINE} serves its new host key"
}

if [[ "${1:-}" == --hop ]]; then
  hop
fi
read_inputs
check_inputs
write_files
export WORK SSH_HOST SSH_PORT PROXY_HOST PROXY_PORT PROXY_USER
run_program
verify
printf '%s\n' "${KEY}"
