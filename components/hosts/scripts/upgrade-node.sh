#!/usr/bin/env bash
# upgrade-node.sh: on a joined GPU node, before its kube-tools step, after roll-drain.sh drained
# it: move the node to KUBERNETES_MINOR as kubeadm's procedure for worker nodes says
# ("Upgrading Linux nodes", kubernetes.io/docs/tasks/administer-cluster/kubeadm/
# upgrading-linux-nodes/): kubeadm of the new minor, `kubeadm upgrade node` (the kubelet
# configuration of the new minor), then kubelet and kubectl, kubelet restarted.
# A node not joined yet has nothing to upgrade (kubeadm join configures it); a node whose kubelet
# already is of KUBERNETES_MINOR neither. Refuses to move the kubelet past the API server: the
# control plane goes first (upgrade-control-plane.sh, or by hand for an existing one).
#
# Inputs:
#   KUBERNETES_MINOR          the minor the node should run, e.g. 1.36 (required)
#   UPGRADE_TIMEOUT_SECONDS   bound on kubeadm upgrade node (default 600)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

KUBELET_CONF=/etc/kubernetes/kubelet.conf

check_inputs() {
  require_vars KUBERNETES_MINOR
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
}

# upgrade_needed: false (saying why) when the node has nothing to upgrade.
upgrade_needed() {
  local kubelet server
  if [[ ! -f "${KUBELET_CONF}" ]]; then
    log "not joined yet (${KUBELET_CONF} absent): kubeadm join configures kubelet ${KUBERNETES_MINOR}"
    return 1
  fi
  kubelet="$(minor_of "$(installed_version kubelet)")"
  [[ -n "${kubelet}" ]] ||
    fatal "joined (${KUBELET_CONF}) but no kubelet package installed: kubelet was removed or" \
      "installed without apt; install the kubelet package of the running minor on this node" \
      "(apt-get install kubelet), then pulumi up again"
  check_one_minor_step "${kubelet}" "this node's kubelet"
  if [[ "${kubelet}" == "${KUBERNETES_MINOR}" ]]; then
    log "kubelet already ${kubelet}, nothing to upgrade"
    return 1
  fi
  # The node's own credentials may read /version (system:public-info-viewer).
  server="$(api_server_minor "${KUBELET_CONF}")"
  if ((${KUBERNETES_MINOR#1.} > ${server#1.})); then
    fatal "gpu-cluster:kubernetesVersion is ${KUBERNETES_MINOR} but the API server runs ${server};" \
      "a kubelet must never be newer than its API server: upgrade the control plane first," \
      "or set gpu-cluster:kubernetesVersion to ${server}"
  fi
  log "kubelet ${kubelet} -> ${KUBERNETES_MINOR} (API server ${server})"
}

install_kubeadm() {
  upgrade_kubeadm_package
}

upgrade_node_config() {
  timeout -k 10 "${UPGRADE_TIMEOUT_SECONDS:-600}" kubeadm upgrade node >&2 ||
    fatal "kubeadm upgrade node failed (its output is above); the node stays drained"
}

install_kubelet() {
  upgrade_kubelet_package
}

main() {
  init_script upgrade-node
  check_inputs
  make_temp_dir
  upgrade_needed || return 0
  run_steps \
    install_kubeadm \
    upgrade_node_config \
    install_kubelet
}

main "$@"
