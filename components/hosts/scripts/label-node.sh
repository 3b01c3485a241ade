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
  local found err
  require_node_name
  err="$(temp_path get-node.err)"
  # An API server that does not answer is not a Node that left: say which it is.
  if ! found="$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found -o name 2>"${err}")"; then
    fatal "could not read Node ${NODE_NAME} from the API server: $(head -c 300 "${err}")"
  fi
  [[ -n "${found}" ]] ||
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
    if ! split "${NODE_LABELS:-}" | cut -d= -f1 | grep -qxF -- "${key}"; then
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

# key_effect <taint>: "key:Effect" of key=value:Effect or key:Effect (what kubectl matches a
# taint by: one taint per key and effect, its value replaced with --overwrite).
key_effect() {
  printf '%s:%s\n' "${1%%[=:]*}" "${1##*:}"
}

# node_taints: "key:Effect" of each taint the Node has now, one a line.
node_taints() {
  local out keys=() effects=() i
  out="$(admin_kubectl get node "${NODE_NAME}" \
    -o 'jsonpath={.spec.taints[*].key}{"\n"}{.spec.taints[*].effect}')"
  {
    read -r -a keys || true
    read -r -a effects || true
  } <<<"${out}"
  for ((i = 0; i < ${#keys[@]}; i++)); do
    printf '%s:%s\n' "${keys[i]}" "${effects[i]:-}"
  done
}

# A taint this program set before and no longer wants is removed as key:Effect- (kubectl removes
# by key and effect). One whose key and effect are still wanted with another value is not
# removed: --overwrite replaces it, and kubectl refuses to set and remove one key and effect in
# the same command. One the Node no longer has (taken off by hand) is left out: kubectl fails
# the whole command on removing a taint that is not there (`taint "k:Effect" not found`).
reconcile_taints() {
  local previous item have wanted="" removed="" args=()
  previous="$(annotation "${TAINTS_ANNOTATION}")"
  have="$(node_taints)"
  while IFS= read -r item; do
    [[ -n "${item}" ]] || continue
    wanted+="$(key_effect "${item}")"$'\n'
  done < <(split "${NODE_TAINTS:-}")
  while IFS= read -r item; do
    [[ -n "${item}" ]] || continue
    item="$(key_effect "${item}")"
    grep -qxF -- "${item}" <<<"${wanted}" && continue
    if grep -qxF -- "${item}" <<<"${have}"; then
      args+=("${item}-")
      removed+="${item} "
    else
      log "taint ${item} set before is not on the Node any more, nothing to remove"
    fi
  done < <(split "${previous}")
  while IFS= read -r item; do
    [[ -n "${item}" ]] && args+=("${item}")
  done < <(split "${NODE_TAINTS:-}")
  if ((${#args[@]} > 0)); then
    admin_kubectl taint node "${NODE_NAME}" --overwrite "${args[@]}" >&2
  fi
  log "taints: ${NODE_TAINTS:-none}; previously set, now removed: ${removed:-none}"
}

remember() {
  admin_kubectl annotate node "${NODE_NAME}" --overwrite \
    "${LABELS_ANNOTATION}=${NODE_LABELS:-}" "${TAINTS_ANNOTATION}=${NODE_TAINTS:-}" >&2
}

main() {
  init_script labels
  make_temp_dir
  check_inputs
  run_steps \
    reconcile_labels \
    reconcile_taints \
    remember
}

main "$@"
