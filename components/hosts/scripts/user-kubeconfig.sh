#!/usr/bin/env bash
# user-kubeconfig.sh: print a kubeconfig for the operators' own identity, not the cluster's
# admin.conf: a client certificate from the cluster CA (`kubeadm kubeconfig user`) with its own
# name, in one group (the certificate's organization, which a ClusterRoleBinding grants a
# ClusterRole: deleting the binding revokes it), valid for a bounded time, its server rewritten
# to the address the operator's machine reaches. The output is a secret; nothing of it is logged.
#
# Inputs:
#   API_SERVER      https://host:port the kubeconfig should point at (required)
#   CLIENT_NAME     the certificate's user name (CN) (required)
#   GROUP           the certificate's group (O) (required)
#   VALIDITY_HOURS  lifetime of the certificate, hours (required)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
RBAC_NAME_RE='^[A-Za-z0-9]([A-Za-z0-9:._-]{0,61}[A-Za-z0-9])?$'

check_inputs() {
  require_vars API_SERVER CLIENT_NAME GROUP VALIDITY_HOURS
  [[ "${API_SERVER}" =~ ^https://[A-Za-z0-9.-]+:[0-9]+$ ]] ||
    fatal "API_SERVER must be https://host:port, got '${API_SERVER}'"
  [[ "${CLIENT_NAME}" =~ ${RBAC_NAME_RE} ]] ||
    fatal "CLIENT_NAME must be a user name like dev-gpu-operator, got '${CLIENT_NAME}'"
  [[ "${GROUP}" =~ ${RBAC_NAME_RE} ]] ||
    fatal "GROUP must be a group name like gpu-cluster:operators, got '${GROUP}'"
  [[ "${VALIDITY_HOURS}" =~ ^[1-9][0-9]{0,3}$ ]] ||
    fatal "VALIDITY_HOURS must be a number of hours (1-9999), got '${VALIDITY_HOURS}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "${ADMIN_CONF} not found on this host; it must be a kubeadm control-plane node"
}

print_kubeconfig() {
  local issued
  issued="$(temp_path user.conf)"
  (
    umask 077
    kubeadm kubeconfig user --client-name "${CLIENT_NAME}" --org "${GROUP}" \
      --validity-period "${VALIDITY_HOURS}h" >"${issued}"
  )
  # kubeadm writes one cluster (the kubeadm-config's endpoint); every server line is rewritten.
  awk -v server="${API_SERVER}" '
    $1 == "server:" { sub(/server:.*/, "server: " server) }
    { print }' "${issued}"
  log "kubeconfig of ${CLIENT_NAME} (group ${GROUP}, ${VALIDITY_HOURS}h) for ${API_SERVER}" \
    "printed (secret output)"
}

main() {
  init_script user-kubeconfig
  check_inputs
  make_temp_dir
  run_steps print_kubeconfig
}

main "$@"
