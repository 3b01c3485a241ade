#!/usr/bin/env bash
# label-node.sh: on the control plane, reconcile a Node's labels and taints with its pool's
# through the API (never by a re-join): set the wanted ones with --overwrite, remove the ones this
# program set before and no longer wants (remembered in annotations on the Node), leave every
# other label and taint alone.
#
# Inputs:
#   NODE_NAME    the Node (required)
#   NODE_LABELS  comma-separated key=value labels the pool wants (may be empty)
#   NODE_TAINTS  comma-separated key=value:Effect or key:Effect taints (may be empty)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

LABELS_ANNOTATION=gpu-cluster.io/managed-labels
TAINTS_ANNOTATION=gpu-cluster.io/managed-taints

check_inputs() {
  require_node_name
  [[ -n "$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found -o name)" ]] ||
    fatal "Node ${NODE_NAME} expected (the node-ready step waits for it), not found: it left" \
      "the cluster since (deleted, or its kubelet registered another name); look at" \
      "'kubectl get nodes', then pulumi up again"
}

# annotation <key>: the value of one annotation of the Node ("" when absent).
annotation() {
  admin_kubectl get node "${NODE_NAME}" -o "jsonpath={.metadata.annotations.${1//./\\.}}"
}

# split <list>: one item per line.
split() {
  local items=()
  IFS=, read -r -a items <<<"$1"
  ((${#items[@]} == 0)) || printf '%s\n' "${items[@]}"
}

reconcile_labels() {
  local previous key removed="" args=()
  previous="$(annotation "${LABELS_ANNOTATION}")"
  while IFS= read -r key; do
    [[ -n "${key}" ]] || continue
    if ! split "${NODE_LABELS:-}" | grep -q "^${key}="; then
      args+=("${key}-")
      removed+="${key} "
    fi
  done < <(split "${previous}" | cut -d= -f1)
  while IFS= read -r key; do
    [[ -n "${key}" ]] && args+=("${key}")
  done < <(split "${NODE_LABELS:-}")
  if ((${#args[@]} > 0)); then
    admin_kubectl label node "${NODE_NAME}" --overwrite "${args[@]}" >&2
  fi
  log "labels: ${NODE_LABELS:-none}; previously set, now removed: ${removed:-none}"
}

reconcile_taints() {
  local previous item args=()
  previous="$(annotation "${TAINTS_ANNOTATION}")"
  while IFS= read -r item; do
    [[ -n "${item}" ]] || continue
    if ! split "${NODE_TAINTS:-}" | grep -qxF -- "${item}"; then
      args+=("${item}-")
    fi
  done < <(split "${previous}")
  while IFS= read -r item; do
    [[ -n "${item}" ]] && args+=("${item}")
  done < <(split "${NODE_TAINTS:-}")
  if ((${#args[@]} > 0)); then
    admin_kubectl taint node "${NODE_NAME}" --overwrite "${args[@]}" >&2
  fi
  log "taints: ${NODE_TAINTS:-none}"
}

remember() {
  admin_kubectl annotate node "${NODE_NAME}" --overwrite \
    "${LABELS_ANNOTATION}=${NODE_LABELS:-}" "${TAINTS_ANNOTATION}=${NODE_TAINTS:-}" >&2
}

main() {
  init_script labels
  check_inputs
  run_steps \
    reconcile_labels \
    reconcile_taints \
    remember
}

main "$@"
