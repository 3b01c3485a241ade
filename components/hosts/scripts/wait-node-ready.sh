#!/usr/bin/env bash
# wait-node-ready.sh: on the control plane, wait (bounded) until a joined node's Node object
# exists and is Ready. Its delete counterpart is drain-node.sh.
#
# Inputs:
#   NODE_NAME              the Node to wait for (required)
#   READY_TIMEOUT_SECONDS  how long to wait (default 600)
#   POLL_SECONDS           pause between checks (default 5)
#   TOKEN_ID               id (public part) of the bootstrap token minted for this node's join:
#                          deleted once the node is Ready (the token never expires on its own, so
#                          a join retried at any time after a failure still finds it valid)
#   CSR_WAIT_SECONDS       how long to wait for the node's kubelet serving certificate request
#                          (default 10: a Ready kubelet has filed it already, when the cluster's
#                          kubelet configuration has serverTLSBootstrap)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

check_inputs() {
  require_node_name
  [[ "${READY_TIMEOUT_SECONDS:-600}" =~ ^[0-9]+$ ]] ||
    fatal "READY_TIMEOUT_SECONDS must be a number of seconds, got '${READY_TIMEOUT_SECONDS}'"
}

# ready_status: "True", "False", "Unknown", "" (no Ready condition yet) or "absent".
ready_status() {
  local found
  found="$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found \
    -o 'jsonpath={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}')"
  if [[ -z "${found}" ]]; then
    echo absent
  else
    printf '%s\n' "${found#* }"
  fi
}

wait_for_node_ready() {
  local limit="${READY_TIMEOUT_SECONDS:-600}" status
  local deadline=$((SECONDS + limit))
  while true; do
    status="$(ready_status)"
    if [[ "${status}" == True ]]; then
      log "Node ${NODE_NAME} Ready"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      break
    fi
    sleep "${POLL_SECONDS:-5}"
  done
  if [[ "${status}" == absent ]]; then
    fatal "Node ${NODE_NAME} not registered after ${limit}s: kubelet on the node never" \
      "reached the API; look at 'journalctl -u kubelet' on ${NODE_NAME}"
  fi
  fatal "Node ${NODE_NAME} not Ready after ${limit}s (Ready=${status:-none}); look at" \
    "'kubectl describe node ${NODE_NAME}' (CNI pod on it, kubelet conditions) and" \
    "'journalctl -u kubelet' on the node"
}

delete_join_token() {
  if [[ -z "${TOKEN_ID:-}" ]]; then
    log "no join token to delete"
    return 0
  fi
  # Not echoed: a whole token (id.secret) passed by mistake would put its secret in the log.
  [[ "${TOKEN_ID}" =~ ^[a-z0-9]{6}$ ]] ||
    fatal "TOKEN_ID must be a bootstrap token's id, 6 of [a-z0-9] (the part before the dot)," \
      "got ${#TOKEN_ID} characters (not shown: they may hold the token's secret)"
  if kubeadm token delete "${TOKEN_ID}" >&2; then
    log "bootstrap token ${TOKEN_ID} of ${NODE_NAME} deleted: the node has joined"
  else
    log "bootstrap token ${TOKEN_ID} already gone"
  fi
}

# The kubelet serves with a certificate of the cluster CA (serverTLSBootstrap), which the API
# server verifies (--kubelet-certificate-authority): approve the node's request for it.
approve_serving_certificate() {
  approve_kubelet_serving_csr "${NODE_NAME}" "${CSR_WAIT_SECONDS:-10}"
}

main() {
  init_script node-ready
  check_inputs
  run_steps \
    wait_for_node_ready \
    approve_serving_certificate \
    delete_join_token
}

main "$@"
