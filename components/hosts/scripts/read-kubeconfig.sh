#!/usr/bin/env bash
# read-kubeconfig.sh: print the cluster's admin kubeconfig with its server rewritten to the
# address the operator's machine reaches. The output is a secret (Pulumi keeps it encrypted
# and unlogged); nothing of it goes to the log.
#
# Inputs:
#   API_SERVER  https://host:port the kubeconfig should point at (required)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_vars API_SERVER
  [[ "${API_SERVER}" =~ ^https://[A-Za-z0-9.-]+:[0-9]+$ ]] ||
    fatal "API_SERVER must be https://host:port, got '${API_SERVER}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "${ADMIN_CONF} not found on this host; it must be a kubeadm control-plane node"
}

print_kubeconfig() {
  local servers
  servers="$(awk '$1 == "server:" { n++ } END { print n + 0 }' "${ADMIN_CONF}")"
  [[ "${servers}" == 1 ]] ||
    fatal "expected one cluster server in ${ADMIN_CONF}, found ${servers}"
  awk -v server="${API_SERVER}" '
    $1 == "server:" { sub(/server:.*/, "server: " server) }
    { print }' "${ADMIN_CONF}"
  log "admin kubeconfig for ${API_SERVER} printed (secret output)"
}

main() {
  init_script kubeconfig
  check_inputs
  run_steps print_kubeconfig
}

main "$@"
