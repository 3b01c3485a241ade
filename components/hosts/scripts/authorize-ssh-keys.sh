#!/usr/bin/env bash
# authorize-ssh-keys.sh: the login user's authorized_keys holds exactly the stack's keys, so a
# rotated ssh.publicKey reaches running machines without replacing them.
#
# Inputs:
#   SSH_USER         the login user whose ~/.ssh/authorized_keys is written (required)
#   AUTHORIZED_KEYS  OpenSSH public key lines, one per line (required): ssh.publicKey and the key
#                    the steps log in with (derived from sshPrivateKey), so this session never
#                    locks itself out; once both are the new key, the old one is gone
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

KEY_RE='^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( .*)?$'
HOME_DIR=""

check_inputs() {
  require_vars SSH_USER AUTHORIZED_KEYS
  local line
  while IFS= read -r line; do
    [[ -z "${line}" || "${line}" =~ ${KEY_RE} ]] ||
      fatal "AUTHORIZED_KEYS: a line is not an OpenSSH public key: '${line:0:40}...'"
  done <<<"${AUTHORIZED_KEYS}"
  local entry
  # getent exits 2 for a user it does not know: that is the case the check below names.
  entry="$(getent passwd "${SSH_USER}")" || entry=""
  HOME_DIR="$(cut -d: -f6 <<<"${entry}")"
  [[ -n "${HOME_DIR}" && -d "${HOME_DIR}" ]] ||
    fatal "user ${SSH_USER} expected with a home directory, getent finds '${HOME_DIR}';" \
      "ssh.user must name a user this host has (the image's login user, e.g. ubuntu)"
}

write_authorized_keys() {
  local dir="${HOME_DIR}/.ssh" staged changed
  staged="$(temp_path authorized_keys)"
  {
    printf '# Managed by gpu-cluster (ssh.publicKey): edits are replaced on the next pulumi up.\n'
    printf '%s\n' "${AUTHORIZED_KEYS}" | awk 'NF && !seen[$0]++'
  } >"${staged}"
  install -d -m 0700 -o "${SSH_USER}" -g "$(id -gn "${SSH_USER}")" "${dir}"
  changed="$(install_file_if_changed "${staged}" "${dir}/authorized_keys" 0600)"
  chown "${SSH_USER}:$(id -gn "${SSH_USER}")" "${dir}/authorized_keys"
  if [[ "${changed}" == changed ]]; then
    log "authorized_keys of ${SSH_USER} now holds $(grep -cv '^#' "${dir}/authorized_keys") key(s)"
  fi
}

main() {
  init_script ssh-keys
  check_inputs
  make_temp_dir
  run_steps write_authorized_keys
}

main "$@"
