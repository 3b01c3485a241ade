#!/usr/bin/env bash
# roll-uncordon.sh: on the control plane, last of a node (after its join saw it Ready with its
# GPUs, and its validation Job): wait for Ready, reconcile its labels and taints with the pool's
# (set at registration by the join; here a change of the pool reaches running nodes through the
# API, never by a re-join), approve its kubelet serving certificate when one waits, delete the
# never-expiring join tokens of earlier releases, record CHANGE as done on the Node (annotation
# gpu-cluster.io/node-change), uncordon it when the roll cordoned it, give back the pool slot
# roll-drain.sh took. On a node that was never drained (its first `pulumi up`) nothing is
# uncordoned and no slot given back.
#
# Inputs:
#   NODE_NAME              the Node to put back (required)
#   POOL_NAME              its pool; names the slots (required)
#   MAX_UNAVAILABLE        slots of the pool (required, >= 1)
#   READY_TIMEOUT_SECONDS  how long to wait for the Node to be Ready (required)
#   CHANGE                 digest of the disruptive steps; a new one re-runs this step (required)
#   NODE_LABELS            comma-separated key=value labels the pool wants (may be empty)
#   NODE_TAINTS            comma-separated key=value:Effect or key:Effect taints (may be empty)
#   SERVING_NAMES          the names the node's kubelet may serve as, one a line, as openssl
#                          prints them ("DNS:<node name>", "DNS:<private DNS name>",
#                          "IP Address:<private IP>"): the program's, not the kubelet's (required)
#   CSR_WAIT_SECONDS       how long to look for the kubelet's serving certificate request
#                          (default 10: a Ready kubelet has filed it already)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_vars POOL_NAME MAX_UNAVAILABLE READY_TIMEOUT_SECONDS CHANGE SERVING_NAMES
  require_node_name
  require_serving_names
  [[ "${MAX_UNAVAILABLE}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "MAX_UNAVAILABLE must be a whole number of at least 1, got '${MAX_UNAVAILABLE}'"
  [[ "${READY_TIMEOUT_SECONDS}" =~ ^[0-9]+$ ]] ||
    fatal "READY_TIMEOUT_SECONDS must be a whole number, got '${READY_TIMEOUT_SECONDS}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "cannot read ${ADMIN_CONF}: this step runs on a kubeadm control-plane node"
}

wait_node_ready() {
  local found err
  err="$(temp_path get-node.err)"
  # An API server that does not answer is not a Node that left: say which it is.
  found="$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found -o name 2>"${err}")" ||
    fatal "could not read Node ${NODE_NAME} from the API server: $(head -c 300 "${err}")"
  [[ -n "${found}" ]] ||
    fatal "Node ${NODE_NAME} is not registered; it must have joined before it is put back"
  admin_kubectl wait --for=condition=Ready "node/${NODE_NAME}" \
    --timeout="${READY_TIMEOUT_SECONDS}s" >&2 ||
    fatal "Node ${NODE_NAME} not Ready after ${READY_TIMEOUT_SECONDS}s; it stays cordoned." \
      "Look at 'journalctl -u kubelet' on the node"
}

LABELS_ANNOTATION=gpu-cluster.io/managed-labels
TAINTS_ANNOTATION=gpu-cluster.io/managed-taints

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

remember_labels_and_taints() {
  remember
}

approve_serving_certificate() {
  local -a names
  mapfile -t names <<<"${SERVING_NAMES}"
  approve_kubelet_serving_csr "${NODE_NAME}" "${CSR_WAIT_SECONDS:-10}" "${names[@]}"
}

# Earlier releases minted a token per join that never expired (kubeadm token create --ttl 0s)
# and deleted it once the node was Ready; one left by a join that failed is a standing credential
# to register nodes: delete this node's. Tokens with an expiry (this release's) are left to
# kube-controller-manager's token cleaner.
delete_lasting_join_tokens() {
  local id description expires found=0
  while IFS=$'\t' read -r id description expires; do
    [[ "${description}" == "gpu-cluster: join of ${NODE_NAME}" && -z "${expires}" ]] || continue
    admin_kubectl -n kube-system delete secret "bootstrap-token-${id}" --ignore-not-found >&2
    found=$((found + 1))
  done < <(admin_kubectl -n kube-system get secrets \
    --field-selector type=bootstrap.kubernetes.io/token -o \
    'jsonpath={range .items[*]}{.data.token-id}{"\t"}{.data.description}{"\t"}{.data.expiration}{"\n"}{end}' |
    while IFS=$'\t' read -r id description expires; do
      printf '%s\t%s\t%s\n' "$(base64 -d <<<"${id}")" "$(base64 -d <<<"${description}")" \
        "$(base64 -d <<<"${expires}")"
    done)
  log "never-expiring join tokens of ${NODE_NAME} deleted: ${found}"
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
    reconcile_labels \
    reconcile_taints \
    remember_labels_and_taints \
    approve_serving_certificate \
    delete_lasting_join_tokens \
    record_change \
    uncordon_node \
    release_slot
}

main "$@"
