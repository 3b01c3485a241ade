#!/usr/bin/env bash
# check-version-skew.sh: before any node is touched, check that the kubelet/kubeadm minor this
# stack installs can join the cluster. kubelet may be up to 3 minors older than the API server
# (Kubernetes version skew policy), but the nodes get kubeadm of the same minor and
# `kubeadm join` needs kubeadm of the cluster's own minor (kubeadm's skew policy: "kubeadm join"
# uses the same version as the control plane), so the minor must equal the API server's. Every
# refusal advises that one minor, or, when the program cannot install it (gpu-cluster:
# kubernetesVersion outside SUPPORTED_MINORS), how the cluster gets to one it can.
#
# Inputs:
#   KUBERNETES_MINOR    the kubelet/kubeadm minor the nodes get, e.g. 1.35 (required)
#   SUPPORTED_MINORS    the minors gpu-cluster:kubernetesVersion accepts, oldest first,
#                       comma-separated (default: any)
#   MAX_KUBELET_LAG     how many minors older than the API server kubelet may be (default 3)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
SERVER_MINOR=""

check_inputs() {
  require_vars KUBERNETES_MINOR
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "${ADMIN_CONF} not found on this host; controlPlane.host must be a kubeadm" \
      "control-plane node"
}

read_server_version() {
  local body version
  body="$(kubectl --kubeconfig="${ADMIN_CONF}" --request-timeout=30s get --raw /version)" ||
    fatal "the API server did not answer 'kubectl get --raw /version' on this host"
  version="$(version_minor_of "${body}")"
  [[ "${version}" =~ ^1\.[0-9]+$ ]] ||
    fatal "no gitVersion in the API server's /version answer"
  SERVER_MINOR="${version}"
  log "API server ${SERVER_MINOR}, kubelet and kubeadm ${KUBERNETES_MINOR}"
}

# advice: the one setting every check here accepts, the API server's own minor; when
# gpu-cluster:kubernetesVersion cannot take it, how to reach a minor it can.
advice() {
  local supported=() oldest newest
  IFS=, read -r -a supported <<<"${SUPPORTED_MINORS:-}"
  if ((${#supported[@]} == 0)) || [[ ",${SUPPORTED_MINORS}," == *",${SERVER_MINOR},"* ]]; then
    echo "set gpu-cluster:kubernetesVersion to ${SERVER_MINOR}"
    return 0
  fi
  oldest="${supported[0]}" newest="${supported[${#supported[@]} - 1]}"
  if ((${SERVER_MINOR#1.} < ${oldest#1.})); then
    echo "this program installs ${SUPPORTED_MINORS//,/, } only: upgrade the cluster with" \
      "kubeadm, one minor at a time, to ${oldest}, then set gpu-cluster:kubernetesVersion to" \
      "${oldest}"
  else
    echo "this program installs ${SUPPORTED_MINORS//,/, } only and kubeadm does not" \
      "downgrade: a cluster on ${SERVER_MINOR} needs a release of this program that supports" \
      "it (newest here: ${newest})"
  fi
}

check_skew() {
  local kubelet="${KUBERNETES_MINOR#1.}" server="${SERVER_MINOR#1.}"
  local lag="${MAX_KUBELET_LAG:-3}"
  if ((kubelet > server)); then
    fatal "kubelet ${KUBERNETES_MINOR} would be newer than the API server ${SERVER_MINOR};" \
      "$(advice)"
  fi
  if ((server - kubelet > lag)); then
    fatal "kubelet ${KUBERNETES_MINOR} would be more than ${lag} minors older than the API" \
      "server ${SERVER_MINOR}; $(advice)"
  fi
  if ((kubelet != server)); then
    fatal "kubeadm ${KUBERNETES_MINOR} would join an API server of ${SERVER_MINOR}: kubeadm join" \
      "needs the cluster's own minor (the 3-minor allowance is the kubelet's, not kubeadm's);" \
      "$(advice)"
  fi
  log "version skew ok"
}

main() {
  init_script version-skew
  check_inputs
  run_steps \
    read_server_version \
    check_skew
}

main "$@"
