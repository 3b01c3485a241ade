#!/usr/bin/env bash
# disable-nouveau.sh: keep the open-source nouveau driver off the GPUs so the NVIDIA driver can
# bind them. Blocklists it (rebuilding the initramfs only when the blocklist changed) and unloads
# it. When it is in use and cannot be unloaded, the host must reboot: this step stops taking new
# SSH connections, schedules the reboot a few seconds out and succeeds, so the next step (the
# driver) keeps dialling until the host is back, without nouveau.
#
# Inputs (all optional):
#   REBOOT_DELAY_SECONDS  how long after this step ends the host reboots (default 5)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

check_inputs() {
  [[ "${REBOOT_DELAY_SECONDS:-5}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "REBOOT_DELAY_SECONDS must be a positive number of seconds, got '${REBOOT_DELAY_SECONDS}'"
}

# The running session survives (Ubuntu's ssh units kill only the listener); new dials are
# refused until sshd starts again after the reboot, so no step lands on the old boot.
stop_new_ssh_connections() {
  local unit
  for unit in ssh.socket ssh.service; do
    if systemctl is-active --quiet "${unit}"; then
      systemctl stop "${unit}"
    fi
  done
}

unload_or_reboot() {
  if unload_nouveau; then
    return 0
  fi
  local delay="${REBOOT_DELAY_SECONDS:-5}"
  log "nouveau is in use and cannot be unloaded: rebooting in ${delay}s (it stays blocklisted);" \
    "the next step reconnects after the reboot"
  stop_new_ssh_connections
  systemd-run --on-active="${delay}" --unit=gpu-cluster-nouveau-reboot systemctl reboot >&2
}

main() {
  init_script nouveau
  check_inputs
  make_temp_dir
  run_steps \
    blocklist_nouveau \
    unload_or_reboot
}

main "$@"
