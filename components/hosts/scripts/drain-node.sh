#!/usr/bin/env bash
# drain-node.sh: on the control plane, take a node out of the cluster before its host is
# reset: drain (evict its pods, DaemonSets excepted), then delete the Node object.
# Succeeds without doing anything when the Node is already gone: teardown must not fail.
# A Node that is not Ready (its machine terminated or unreachable) cannot confirm an eviction:
# its pods are deleted without eviction (--force --disable-eviction), so a dead host never blocks.
#
# Inputs:
#   NODE_NAME              the Node to remove (required)
#   DRAIN_TIMEOUT_SECONDS  bound on the drain (default 300)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_node_name
  [[ "${DRAIN_TIMEOUT_SECONDS:-300}" =~ ^[0-9]+$ ]] ||
    fatal "DRAIN_TIMEOUT_SECONDS must be a number of seconds, got '${DRAIN_TIMEOUT_SECONDS}'"
}

node_exists() {
  [[ -n "$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found -o name)" ]]
}

node_ready() {
  [[ "$(admin_kubectl get node "${NODE_NAME}" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

drain_node() {
  if ! node_exists; then
    log "Node ${NODE_NAME} already gone, nothing to drain"
    return 0
  fi
  local limit="${DRAIN_TIMEOUT_SECONDS:-300}" unreachable=()
  if ! node_ready; then
    log "Node ${NODE_NAME} is not Ready (host gone or unreachable): deleting its pods" \
      "without eviction"
    unreachable=(--force --disable-eviction)
  fi
  timeout -k 10 "$((limit + 30))" kubectl --kubeconfig="${ADMIN_CONF}" \
    drain "${NODE_NAME}" --ignore-daemonsets "${unreachable[@]}" \
    --delete-emptydir-data --timeout="${limit}s" >&2 ||
    fatal "drain of ${NODE_NAME} did not finish in ${limit}s (a PodDisruptionBudget or a pod" \
      "that will not stop?); look at 'kubectl get pods -A -o wide" \
      "--field-selector spec.nodeName=${NODE_NAME}'"
}

delete_node() {
  if ! node_exists; then
    log "Node ${NODE_NAME} already gone"
    return 0
  fi
  admin_kubectl delete node "${NODE_NAME}" --ignore-not-found >&2
  log "Node ${NODE_NAME} deleted"
}

main() {
  init_script drain
  check_inputs
  run_steps \
    drain_node \
    delete_node
}

main "$@"
