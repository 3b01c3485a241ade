#!/usr/bin/env bash
# mint-join-token.sh: on the control plane, create a fresh short-lived bootstrap token for
# one node and print it with the CA public key hash, as one JSON line on stdout:
#   {"token": "abcdef.0123456789abcdef", "caCertHash": "sha256:<64 hex>"}
# The output is a secret (Pulumi keeps it encrypted and unlogged); the log never shows it.
#
# Inputs:
#   NODE_NAME  the node the token is for (named in the token's description) (required)
#   NODE_IP    the joining machine's private address: a Node of the same name elsewhere that
#              is not Ready is a leftover of a replaced machine and is removed, since kubeadm
#              join refuses a name that exists
#   TOKEN_TTL  token lifetime, e.g. 30m (default 30m)
#   CA_CERT    the cluster CA certificate (default /etc/kubernetes/pki/ca.crt)
set -Eeuo pipefail
set +x # the token must not reach a trace

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

TOKEN_RE='^[a-z0-9]{6}\.[a-z0-9]{16}$'
CA_CERT="${CA_CERT:-/etc/kubernetes/pki/ca.crt}"
TOKEN_TTL="${TOKEN_TTL:-30m}"
TOKEN=""
CA_HASH=""

check_inputs() {
  require_node_name
  [[ "${TOKEN_TTL}" =~ ^[0-9]+[smh]$ ]] ||
    fatal "TOKEN_TTL must be a duration like 30m, got '${TOKEN_TTL}'"
  [[ -r "${CA_CERT}" ]] ||
    fatal "${CA_CERT} not found on this host; it must be a kubeadm control-plane node"
}

# The hash kubeadm join pins: sha256 of the CA's DER SubjectPublicKeyInfo.
compute_ca_hash() {
  local hex
  # A pipeline under pipefail: an unreadable certificate fails it (sha256sum always prints 64
  # hex digits of whatever reaches it).
  hex="$(openssl x509 -in "${CA_CERT}" -noout -pubkey |
    openssl pkey -pubin -outform der |
    sha256sum | awk '{ print $1 }')" ||
    fatal "could not read the public key of ${CA_CERT} (openssl's error is above): nodes pin" \
      "the cluster CA's key to join; restore the CA kubeadm made there"
  CA_HASH="sha256:${hex}"
  log "CA public key ${CA_HASH}"
}

# A Node of this name left by a previous machine (replaced, or a spot instance taken back)
# makes kubeadm join refuse. Remove it when it is stale; refuse when it is a live node elsewhere.
clear_stale_node() {
  local found ready address
  found="$(admin_kubectl get node "${NODE_NAME}" --ignore-not-found -o \
    jsonpath='{.status.conditions[?(@.type=="Ready")].status}{"\t"}{.status.addresses[?(@.type=="InternalIP")].address}')"
  if [[ -z "${found}" ]]; then
    log "no Node named ${NODE_NAME} yet"
    return 0
  fi
  ready="${found%%$'\t'*}"
  address="${found#*$'\t'}"
  if [[ -n "${NODE_IP:-}" && "${address}" == "${NODE_IP}" ]]; then
    log "Node ${NODE_NAME} is this machine (${address}), keeping it"
    return 0
  fi
  if [[ "${ready}" == True ]]; then
    fatal "a Ready Node named ${NODE_NAME} already exists at ${address:-an unknown address}," \
      "not this machine (${NODE_IP:-address unknown}); kubeadm join would refuse the name." \
      "If that machine is gone for good: kubectl drain ${NODE_NAME} --ignore-daemonsets" \
      "--delete-emptydir-data && kubectl delete node ${NODE_NAME}, then run pulumi up again"
  fi
  log "removing the stale Node ${NODE_NAME} (Ready=${ready:-unknown}, at ${address:-unknown})" \
    "left by a previous machine"
  admin_kubectl delete node "${NODE_NAME}" --ignore-not-found >&2
}

create_token() {
  TOKEN="$(kubeadm token create --ttl "${TOKEN_TTL}" \
    --description "gpu-cluster: join of ${NODE_NAME}" \
    --usages signing,authentication \
    --groups system:bootstrappers:kubeadm:default-node-token)"
  [[ "${TOKEN}" =~ ${TOKEN_RE} ]] ||
    fatal "kubeadm token create printed no bootstrap token (output not shown)"
  log "bootstrap token for ${NODE_NAME} created, valid ${TOKEN_TTL}"
}

print_credentials() {
  printf '{"token": "%s", "caCertHash": "%s"}\n' "${TOKEN}" "${CA_HASH}"
}

main() {
  init_script join-token
  check_inputs
  run_steps \
    compute_ca_hash \
    clear_stale_node \
    create_token \
    print_credentials
}

main "$@"
