#!/usr/bin/env bash
# wait-ready.sh: the host is ready for the bootstrap steps that follow.
#
# Inputs (all optional):
#   CLOUD_INIT_TIMEOUT_SECONDS  bound on `cloud-init status --wait` (default 900)
#   APT_LOCK_TIMEOUT_SECONDS    how long apt waits for the dpkg lock (default 600)
#
# Checks: cloud-init finished; the OS is Ubuntu 22.04 or 24.04; the dpkg lock is
# free (apt-get update waits for it) and the package lists are fresh.
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

SUPPORTED_UBUNTU="22.04 24.04"

wait_for_cloud_init_to_finish() {
  wait_for_cloud_init
}

# os_release_field <key> <file>: the value of KEY=value or KEY="value".
os_release_field() {
  awk -F= -v k="$1" '$1 == k { v = substr($0, length(k) + 2); gsub(/^"|"$/, "", v); print v }' "$2"
}

check_operating_system() {
  local file=/etc/os-release id version
  [[ -r "${file}" ]] || fatal "cannot read ${file}; expected Ubuntu ${SUPPORTED_UBUNTU// / or }"
  id="$(os_release_field ID "${file}")"
  version="$(os_release_field VERSION_ID "${file}")"
  if [[ "${id}" != ubuntu || " ${SUPPORTED_UBUNTU} " != *" ${version} "* ]]; then
    fatal "unsupported OS: ${id:-unknown} ${version:-unknown}; expected Ubuntu ${SUPPORTED_UBUNTU// / or }"
  fi
  log "Ubuntu ${version}"
}

wait_for_apt_and_refresh_lists() {
  apt_update
}

main() {
  init_script ready
  make_temp_dir
  run_steps \
    wait_for_cloud_init_to_finish \
    check_operating_system \
    wait_for_apt_and_refresh_lists
  log "host ready"
}

main "$@"
