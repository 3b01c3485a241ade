#!/usr/bin/env bash
# read-kubeconfig.sh: print the cluster's admin kubeconfig with its server rewritten to the
# address the operator's machine reaches, then one YAML comment line with the hash of the
# cluster CA's public key that joining nodes pin (`# ca-cert-hash: sha256:<hex>`). The output
# is a secret (Pulumi keeps it encrypted and unlogged); nothing of it goes to the log.
#
# Inputs:
#   API_SERVER            https://host:port the kubeconfig should point at (required)
#   CA_CERT               the cluster CA certificate (default /etc/kubernetes/pki/ca.crt)
#   ADMIN_CERT_NOT_AFTER  admin.conf's certificate's expiry as renew-certificates.sh last saw it
#                         (optional): a renewal changes it, and this step runs again
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
CA_CERT="${CA_CERT:-/etc/kubernetes/pki/ca.crt}"

check_inputs() {
  require_vars API_SERVER
  [[ "${API_SERVER}" =~ ^https://[A-Za-z0-9.-]+:[0-9]+$ ]] ||
    fatal "API_SERVER must be https://host:port, got '${API_SERVER}'"
  [[ "${ADMIN_CERT_NOT_AFTER:-2000-01-01T00:00:00Z}" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$ ]] ||
    fatal "ADMIN_CERT_NOT_AFTER must be a UTC time (RFC 3339), got '${ADMIN_CERT_NOT_AFTER}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "${ADMIN_CONF} not found on this host; it must be a kubeadm control-plane node"
  [[ -r "${CA_CERT}" ]] ||
    fatal "${CA_CERT} not found on this host; it must be a kubeadm control-plane node"
}

CA_HASH=""

# The hash kubeadm join pins: sha256 of the CA's DER SubjectPublicKeyInfo. Worked out before
# anything is printed: pulumi-command puts a failed step's stdout into its error message, so
# the kubeconfig is printed only once nothing can fail after it.
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

print_kubeconfig() {
  local servers
  servers="$(awk '$1 == "server:" { n++ } END { print n + 0 }' "${ADMIN_CONF}")"
  [[ "${servers}" == 1 ]] ||
    fatal "expected one cluster server in ${ADMIN_CONF}, found ${servers}"
  awk -v server="${API_SERVER}" '
    $1 == "server:" { sub(/server:.*/, "server: " server) }
    { print }' "${ADMIN_CONF}"
  printf '# ca-cert-hash: %s\n' "${CA_HASH}"
  log "admin kubeconfig for ${API_SERVER} printed (secret output; its certificate valid until" \
    "${ADMIN_CERT_NOT_AFTER:-a date renew-certificates.sh did not report})"
}

main() {
  init_script kubeconfig
  check_inputs
  run_steps compute_ca_hash print_kubeconfig
}

main "$@"
