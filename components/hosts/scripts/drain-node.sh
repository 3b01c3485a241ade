#!/usr/bin/env bash
# drain-node.sh: on the control plane, take a node out of the cluster before its host is
# reset: drain (evict its pods, DaemonSets excepted), then delete the Node object.
# Succeeds without doing anything when the Node is already gone: teardown must not fail.
# A Node that is not Ready (its machine terminated or unreachable) cannot confirm an eviction:
# its pods are deleted without eviction (--force --disable-eviction), so a dead host never blocks.
#
# It acts only on the Node its own machine registered: a Node named NODE_NAME that a later
# machine registered (after the first was lost and replaced, `pulumi refresh` then `up`; an
# existing host with a new host key) carries that machine's identity (label
# gpu-cluster.io/instance-id, spec.providerID) and is left alone. A Node with neither was
# registered before nodes carried them: it is this machine's. An existing host is left as it is:
# its kubelet keeps running and registers the Node again when it restarts, until the host is
# reset (`sudo kubeadm reset -f`; docs/operations.md).
#
# Inputs:
#   NODE_NAME              the Node to remove (required)
#   INSTANCE_ID            the machine this step was made for: an EC2 instance id (i-...) or an
#                          existing host's id (host-<hex>) (optional for steps made before nodes
#                          carried it: then the Node is taken by its name)
#   DRAIN_TIMEOUT_SECONDS  bound on the drain (default 300)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

INSTANCE_LABEL=gpu-cluster.io/instance-id

check_inputs() {
  require_node_name
  [[ "${DRAIN_TIMEOUT_SECONDS:-300}" =~ ^[0-9]+$ ]] ||
    fatal "DRAIN_TIMEOUT_SECONDS must be a number of seconds, got '${DRAIN_TIMEOUT_SECONDS}'"
  [[ -z "${INSTANCE_ID:-}" || "${INSTANCE_ID}" =~ ^(i|host)-[0-9a-f]+$ ]] ||
    fatal "INSTANCE_ID must be an EC2 instance id (i-...) or an existing host's id" \
      "(host-...), got '${INSTANCE_ID}'"
}

# registered_by_this_machine: the Node NODE_NAME is the one INSTANCE_ID registered (or
# carries no instance id at all); false, with the reason logged, when another machine's.
registered_by_this_machine() {
  local found label provider
  [[ -n "${INSTANCE_ID:-}" ]] || return 0
  found="$(admin_kubectl get node "${NODE_NAME}" -o \
    "jsonpath={.metadata.labels.${INSTANCE_LABEL//./\\.}}{\"\t\"}{.spec.providerID}")"
  label="${found%%$'\t'*}"
  provider="${found#*$'\t'}"
  if [[ -z "${label}" && -z "${provider}" ]]; then
    log "Node ${NODE_NAME} carries no instance id (registered before nodes did): taken as ${INSTANCE_ID}'s"
    return 0
  fi
  if [[ "${label}" == "${INSTANCE_ID}" || "${provider}" == */"${INSTANCE_ID}" ]]; then
    return 0
  fi
  log "Node ${NODE_NAME} belongs to ${label:-${provider##*/}}, not to ${INSTANCE_ID} (this" \
    "step's machine, gone since): the new machine's Node is left alone"
  return 1
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
  registered_by_this_machine || return 0
  local limit="${DRAIN_TIMEOUT_SECONDS:-300}" unreachable=()
  if ! node_ready; then
    # A dead kubelet never confirms a deletion: don't wait for it (kubectl drain's
    # --skip-wait-for-delete-timeout, as drain_node_bounded in lib/common.sh has it).
    log "Node ${NODE_NAME} is not Ready (host gone or unreachable): deleting its pods" \
      "without eviction, not waiting for a kubelet that cannot confirm"
    unreachable=(--force --disable-eviction --skip-wait-for-delete-timeout=1)
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
  registered_by_this_machine || return 0
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
