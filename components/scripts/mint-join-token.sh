#!/usr/bin/env bash
# mint-join-token.sh: on the control plane, create a fresh short-lived bootstrap token for
# one node and print it with the CA public key hash, as one JSON line on stdout:
#   {"token": "abcdef.0123456789abcdef", "caCertHash": "sha256:<64 hex>"}
# The output is a secret (Pulumi keeps it encrypted and unlogged); the log never shows it.
#
# Inputs:
#   NODE_NAME  the node the token is for (named in the token's description) (required)
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
  require_vars NODE_NAME
  [[ "${NODE_NAME}" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] ||
    fatal "NODE_NAME must be a lowercase DNS name, got '${NODE_NAME}'"
  [[ "${TOKEN_TTL}" =~ ^[0-9]+[smh]$ ]] ||
    fatal "TOKEN_TTL must be a duration like 30m, got '${TOKEN_TTL}'"
  [[ -r "${CA_CERT}" ]] ||
    fatal "${CA_CERT} not found on this host; it must be a kubeadm control-plane node"
}

# The hash kubeadm join pins: sha256 of the CA's DER SubjectPublicKeyInfo.
compute_ca_hash() {
  local hex
  hex="$(openssl x509 -in "${CA_CERT}" -noout -pubkey |
    openssl pkey -pubin -outform der |
    sha256sum | awk '{ print $1 }')"
  [[ "${hex}" =~ ^[a-f0-9]{64}$ ]] || fatal "could not hash the public key of ${CA_CERT}"
  CA_HASH="sha256:${hex}"
  log "CA public key ${CA_HASH}"
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
    create_token \
    print_credentials
}

main "$@"
