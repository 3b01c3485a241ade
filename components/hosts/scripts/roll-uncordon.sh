#!/usr/bin/env bash
# roll-uncordon.sh: on the control plane, after a disruptive change reached a node and the node
# passed its checks again (the graph runs this after the node's capacity check and validation
# Job): wait for Ready, record CHANGE as done on the Node (annotation gpu-cluster.io/node-change),
# uncordon it when the roll cordoned it, give back the pool slot roll-drain.sh took. On a node
# that was never drained (its first `pulumi up`) only the record changes.
#
# Inputs:
#   NODE_NAME              the Node to put back (required)
#   POOL_NAME              its pool; names the slots (required)
#   MAX_UNAVAILABLE        slots of the pool (required, >= 1)
#   READY_TIMEOUT_SECONDS  how long to wait for the Node to be Ready (required)
#   CHANGE                 digest of the disruptive steps; a new one re-runs this step (required)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_vars POOL_NAME MAX_UNAVAILABLE READY_TIMEOUT_SECONDS CHANGE
  require_node_name
  [[ "${MAX_UNAVAILABLE}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "MAX_UNAVAILABLE must be a whole number of at least 1, got '${MAX_UNAVAILABLE}'"
  [[ "${READY_TIMEOUT_SECONDS}" =~ ^[0-9]+$ ]] ||
    fatal "READY_TIMEOUT_SECONDS must be a whole number, got '${READY_TIMEOUT_SECONDS}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "cannot read ${ADMIN_CONF}: this step runs on a kubeadm control-plane node"
}

wait_node_ready() {
  node_exists ||
    fatal "Node ${NODE_NAME} is not registered; it must have joined before it is put back"
  admin_kubectl wait --for=condition=Ready "node/${NODE_NAME}" \
    --timeout="${READY_TIMEOUT_SECONDS}s" >&2 ||
    fatal "Node ${NODE_NAME} not Ready after ${READY_TIMEOUT_SECONDS}s; it stays cordoned." \
      "Look at 'journalctl -u kubelet' on the node"
}

record_change() {
  record_node_change "${CHANGE}"
}

# Only a node the roll cordoned (roll-drain.sh marks it): an operator's cordon stays.
uncordon_node() {
  if ! roll_cordoned; then
    log "Node ${NODE_NAME} was not cordoned by a roll: schedulability left as it is"
    return 0
  fi
  admin_kubectl uncordon "${NODE_NAME}" >&2
  mark_roll_cordon -
}

release_slot() {
  slot_release "${POOL_NAME}" "${MAX_UNAVAILABLE}" "${NODE_NAME}"
}

main() {
  init_script roll-uncordon
  check_inputs
  make_temp_dir
  log "change ${CHANGE} done on ${NODE_NAME} (pool ${POOL_NAME})"
  run_steps \
    wait_node_ready \
    record_change \
    uncordon_node \
    release_slot
}

main "$@"
