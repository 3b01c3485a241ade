#!/usr/bin/env bash
# prepare-image.sh: leave a builder host that ran the install steps ready to be snapshotted into
# a GPU image.
#
# Inputs:
#   IMAGE_DIGEST   what the image contains (recorded in /etc/gpu-cluster/image) (required)
#
# Every clone must boot as a new machine: cloud-init runs again (its state and logs cleared), a
# fresh /etc/machine-id (systemd makes one when the file is empty), no temporary files of the
# build. The SSH host keys stay: the power-off step still dials this builder after the snapshot,
# and sshd loads its host keys for every new connection, so without them that dial fails and the
# builder keeps running. A clone never serves them: cloud-init's ssh module runs before sshd
# starts (cloud-init.service: Before=sshd.service), deletes every /etc/ssh/ssh_host_*key*
# (`ssh_deletekeys`, set in every machine's user data) and installs the clone's own generated key
# (components/host_keys.py). Services stay enabled, so a clone starts containerd
# at boot; the kubelet only starts once kubeadm join has configured it. Nothing writes to disk
# after the final sync: the snapshot is taken without a reboot.
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

IMAGE_RECORD=/etc/gpu-cluster/image

check_inputs() {
  require_vars IMAGE_DIGEST
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
    flush_to_disk
}

main "$@"
