#!/usr/bin/env bash
# roll-drain.sh: on the control plane, before a disruptive change (driver, container runtime,
# kubelet) reaches a joined node: take one of the pool's slots, cordon the node, drain it.
# A node that has not joined yet (first `pulumi up`, a new machine), or that has completed this
# CHANGE already (Node annotation gpu-cluster.io/node-change), needs neither: the step then does
# nothing. roll-uncordon.sh undoes it once the changed node is validated again.
# Runs on the control plane because the node's own credentials (kubelet, Node authorizer) may
# neither cordon it nor write Leases.
#
# Inputs:
#   NODE_NAME              the Node to take out (required)
#   POOL_NAME              its pool; names the slots (required)
#   MAX_UNAVAILABLE        slots of the pool: nodes disrupted at once (required, >= 1)
#   SLOT_SECONDS           how long a slot holds without renewal: the whole change on one node,
#                          drain to uncordon; past it another node may take it over (required)
#   SLOT_WAIT_SECONDS      how long to wait for a free slot (required)
#   DRAIN_TIMEOUT_SECONDS  bound on the drain (required)
#   CHANGE                 digest of the disruptive steps this drain is for; a new one re-runs
#                          this step (required, logged only)
#   SLOT_POLL_SECONDS      pause between looks for a free slot (default 10)
#   API_WAIT_SECONDS       how long to wait for the API server to answer (default 600)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_vars POOL_NAME MAX_UNAVAILABLE SLOT_SECONDS SLOT_WAIT_SECONDS DRAIN_TIMEOUT_SECONDS CHANGE
  require_node_name
  local name
  for name in MAX_UNAVAILABLE SLOT_SECONDS SLOT_WAIT_SECONDS DRAIN_TIMEOUT_SECONDS; do
    [[ "${!name}" =~ ^[0-9]+$ ]] || fatal "${name} must be a whole number, got '${!name}'"
  done
  ((MAX_UNAVAILABLE >= 1)) || fatal "MAX_UNAVAILABLE must be at least 1, got ${MAX_UNAVAILABLE}"
  [[ "${POOL_NAME}" =~ ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$ ]] ||
    fatal "POOL_NAME must be a lowercase DNS label, got '${POOL_NAME}'"
}

# joined: false (and says why) when there is nothing to take out of the cluster.
joined() {
  if [[ ! -f "${ADMIN_CONF}" ]]; then
    log "no cluster on this host yet (${ADMIN_CONF} absent): ${NODE_NAME} has not joined, nothing to drain"
    return 1
  fi
  # During the first `pulumi up` kubeadm init may have written admin.conf before its API
  # server answers; on a later one the API may be restarting (an upgrade).
  wait_for_api "${API_WAIT_SECONDS:-600}" ||
    fatal "the API server on this host did not answer /readyz within ${API_WAIT_SECONDS:-600}s;" \
      "cannot tell whether ${NODE_NAME} has joined (and must be drained) before changing it"
  if ! node_exists; then
    log "Node ${NODE_NAME} not registered (not joined yet): nothing to drain, no slot needed"
    return 1
  fi
  # Other inputs of this step (slot bounds, pool size) may change without any change for the
  # host: only a CHANGE the node has not completed yet takes it out.
  if [[ "$(node_change)" == "${CHANGE}" ]]; then
    log "Node ${NODE_NAME} already has change ${CHANGE}: nothing to drain"
    return 1
  fi
}

take_slot() {
  slot_acquire "${POOL_NAME}" "${MAX_UNAVAILABLE}" "${NODE_NAME}" "${SLOT_SECONDS}" \
    "${SLOT_WAIT_SECONDS}"
}

# Marked first, so that roll-uncordon.sh uncordons what the roll cordoned and nothing an
# operator cordoned.
cordon_node() {
  mark_roll_cordon "${CHANGE}"
  admin_kubectl cordon "${NODE_NAME}" >&2
}

drain_node() {
  drain_node_bounded "${DRAIN_TIMEOUT_SECONDS}"
}

main() {
  init_script roll-drain
  check_inputs
  make_temp_dir
  log "change ${CHANGE} for ${NODE_NAME} (pool ${POOL_NAME}, maxUnavailable ${MAX_UNAVAILABLE})"
  joined || return 0
  run_steps \
    take_slot \
    cordon_node \
    drain_node
}

main "$@"
