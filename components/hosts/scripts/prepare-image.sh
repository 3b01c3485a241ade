#!/usr/bin/env bash
# prepare-image.sh: leave a builder host that ran the install steps ready to be snapshotted into
# an image (a GPU image or a control-plane image).
#
# Inputs:
#   IMAGE_DIGEST   what the image contains (recorded in /etc/gpu-cluster/image) (required)
#   SSH_USER       the user the steps log in as, whose authorized_keys stays out of the image
#                  (required)
#
# Every clone must boot as a new machine: cloud-init runs again (its state and logs cleared), a
# fresh /etc/machine-id (systemd makes one when the file is empty), no temporary files of the
# build. The SSH host keys stay: the power-off step still dials this builder after the snapshot,
# and sshd loads its host keys for every new connection, so without them that dial fails and the
# builder keeps running. A clone never serves them: cloud-init's ssh module runs before sshd
# starts (cloud-init.service: Before=sshd.service), deletes every /etc/ssh/ssh_host_*key*
# (`ssh_deletekeys`, set in every machine's user data) and installs the clone's own generated key
# (components/hosts/host_keys.py). The login key of the stack that builds the image stays out of it:
# images are shared by every stack of the account, and a clone would otherwise accept the
# builder's key until its own authorized-keys step rewrites the file. The file is emptied on
# disk and its content served from memory (a copy on a tmpfs, bind-mounted over it), so the
# power-off step still logs in; the emptying goes through a descriptor opened before the mount,
# so a failure part way leaves the login working. Services stay enabled, so a clone starts containerd
# at boot; the kubelet only starts once kubeadm join has configured it. Nothing writes to disk
# after the final sync: the snapshot is taken without a reboot.
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

IMAGE_RECORD=/etc/gpu-cluster/image
# A tmpfs (so in no snapshot) holding the builder's login while the image is made.
BUILDER_LOGIN_DIR=/var/lib/gpu-cluster/builder-login

check_inputs() {
  require_vars IMAGE_DIGEST SSH_USER
}

record_contents() {
  printf 'image=%s\n' "${IMAGE_DIGEST}" | write_file_if_changed "${IMAGE_RECORD}" 0644 >/dev/null
  log "image ${IMAGE_DIGEST} recorded in ${IMAGE_RECORD}"
}

quiesce_services() {
  local unit
  for unit in kubelet containerd; do
    if systemctl is-active --quiet "${unit}"; then
      systemctl stop "${unit}"
      log "stopped ${unit} (starts again at boot)"
    fi
  done
}

forget_machine_identity() {
  cloud-init clean --logs
  : >/etc/machine-id
  rm -f /var/lib/dbus/machine-id
  log "cloud-init state and machine-id cleared: each clone makes its own (and gets its own SSH host key)"
}

keep_builder_login_off_disk() {
  local entry home keys copy fd
  # getent exits 2 for a user it does not know: that is the case the check below names.
  entry="$(getent passwd "${SSH_USER}")" || entry=""
  home="$(cut -d: -f6 <<<"${entry}")"
  [[ -n "${home}" && -d "${home}" ]] ||
    fatal "user ${SSH_USER} expected with a home directory, getent finds '${home}';" \
      "ssh.user must be the user the builder's steps log in as"
  keys="${home}/.ssh/authorized_keys"
  if findmnt --mountpoint "${keys}" >/dev/null; then
    log "${keys} already served from memory, empty on disk"
    return 0
  fi
  if [[ ! -s "${keys}" ]]; then
    log "${keys} empty or absent: no login key to keep out of the image"
    return 0
  fi
  mkdir -p "${BUILDER_LOGIN_DIR}"
  findmnt --mountpoint "${BUILDER_LOGIN_DIR}" >/dev/null ||
    mount -t tmpfs -o size=1m,mode=0700 tmpfs "${BUILDER_LOGIN_DIR}"
  copy="${BUILDER_LOGIN_DIR}/authorized_keys"
  cp -p "${keys}" "${copy}"
  exec {fd}<>"${keys}"
  mount --bind "${copy}" "${keys}"
  # The path now shows the copy; the descriptor still reaches the file on disk.
  : >"/proc/self/fd/${fd}"
  exec {fd}>&-
  log "${keys} emptied on disk; the builder's login served from ${copy} until it powers off"
}

flush_to_disk() {
  sync
  log "file systems flushed"
}

main() {
  init_script prepare-image
  make_temp_dir
  run_steps \
    check_inputs \
    record_contents \
    quiesce_services \
    forget_machine_identity \
    keep_builder_login_off_disk \
    flush_to_disk
}

main "$@"
