#!/usr/bin/env bash
# rotate-host-key.sh: replace the host's SSH host key, first thing after boot, with one made
# here, and print its public half (the last line of stdout) for every later step to pin. The
# key the machine booted with came in its user data, which others can read (EC2's
# DescribeInstanceAttribute, IMDS): after this it is gone from the host and never accepted.
# Sent as stdin over the one connection that pins the boot key (components/hosts/host_keys.py),
# before the host has its scripts, so it stands alone (no lib/common.sh).
#
# Inputs: none. The program sends this file alone, with no parameters, and `sudo` drops the
# environment. Needs root (sudo bash -s).
set -Eeuo pipefail

SSH_DIR=/etc/ssh
KEY="${SSH_DIR}/ssh_host_ed25519_key"
# cloud-init's copies of the user data, which hold the boot key's private half.
CLOUD_USER_DATA=(/var/lib/cloud/instance/user-data.txt /var/lib/cloud/instance/user-data.txt.i)

log() { printf '[host-key] %s\n' "$*" >&2; }
fatal() {
  printf '[host-key] FAILED: %s\n' "$*" >&2
  exit 1
}
trap 'fatal "line ${LINENO}: ${BASH_COMMAND}"' ERR

make_key() {
  local staged
  staged="$(mktemp -d "${SSH_DIR}/.rotate.XXXXXX")"
  ssh-keygen -q -t ed25519 -N '' -C '' -f "${staged}/key" ||
    fatal "ssh-keygen could not make an ed25519 key in ${staged}"
  # Every host key goes, the boot key and any other type with it: sshd offers only the new one.
  rm -f "${SSH_DIR}"/ssh_host_*_key "${SSH_DIR}"/ssh_host_*_key.pub
  install -m 0600 -o root -g root "${staged}/key" "${KEY}"
  install -m 0644 -o root -g root "${staged}/key.pub" "${KEY}.pub"
  rm -rf "${staged}"
  log "new ed25519 host key made; every earlier host key removed"
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
  sshd -t || fatal "sshd -t refuses the configuration with the new host key"
  # New connections read the new key; this one (and any other open session) goes on.
  systemctl try-reload-or-restart ssh.service
}

announce() {
  # For an operator who must pin it by hand (hostKeys.<instance id>): the console is read with
  # `aws ec2 get-console-output`, out of band.
  if [[ -w /dev/console ]]; then
    printf 'gpu-cluster host key: %s\n' "$(cut -d' ' -f1,2 "${KEY}.pub")" >/dev/console
  fi
  cut -d' ' -f1,2 "${KEY}.pub"
}

make_key
forget_boot_key
reload_sshd
announce
