#!/usr/bin/env bash
# power-off-builder.sh: power the image builder off once its image has been taken. The builder
# is launched with instance-initiated shutdown behaviour `terminate`, so EC2 terminates it: no
# GPU instance is left running after the build.
#
# Inputs (optional):
#   POWER_OFF_DELAY_SECONDS  delay before the power-off, so this SSH session ends cleanly
#                            (default 5)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

check_inputs() {
  POWER_OFF_DELAY_SECONDS="${POWER_OFF_DELAY_SECONDS:-5}"
  [[ "${POWER_OFF_DELAY_SECONDS}" =~ ^[0-9]+$ ]] ||
    fatal "POWER_OFF_DELAY_SECONDS must be a whole number, got '${POWER_OFF_DELAY_SECONDS}'"
}

schedule_power_off() {
  if systemctl list-timers --all --no-legend | grep -q 'gpu-image-builder-power-off'; then
    log "power-off already scheduled"
    return
  fi
  systemd-run --unit=gpu-image-builder-power-off --on-active="${POWER_OFF_DELAY_SECONDS}" \
    systemctl poweroff >/dev/null
  log "powering off in ${POWER_OFF_DELAY_SECONDS} s: EC2 terminates the builder"
}

main() {
  init_script power-off
  run_steps \
    check_inputs \
    schedule_power_off
}

main "$@"
