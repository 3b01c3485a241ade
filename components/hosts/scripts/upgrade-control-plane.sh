#!/usr/bin/env bash
# upgrade-control-plane.sh: on the managed control plane, before its kube-tools step: when the
# cluster runs the minor before KUBERNETES_MINOR, upgrade it as kubeadm's procedure says
# ("Upgrading kubeadm clusters", kubernetes.io/docs/tasks/administer-cluster/kubeadm/
# kubeadm-upgrade/): kubeadm of the new minor, `kubeadm upgrade plan`, `kubeadm upgrade apply`,
# then kubelet and kubectl, kubelet restarted. The control-plane node is not drained: only the
# control-plane pods, CoreDNS and the CNI run on it, and nothing else could take CoreDNS.
# Nodes follow afterwards, one pool slot at a time (install-kube-tools.sh).
# Refuses, naming gpu-cluster:kubernetesVersion, a skipped minor or a downgrade; a host without a
# cluster yet (first `pulumi up`) has nothing to upgrade.
#
# Inputs:
#   KUBERNETES_MINOR       the minor the cluster should run, e.g. 1.36 (required)
#   APPLY_TIMEOUT_SECONDS  bound on kubeadm upgrade plan/apply (default 900)
#   API_WAIT_SECONDS       how long to wait for the API server after the upgrade (default 300)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
RUNNING_MINOR=""
TARGET_VERSION=""

check_inputs() {
  require_vars KUBERNETES_MINOR
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
}

# upgrade_needed: false (saying why) when there is nothing to upgrade; fails on a skipped minor
# or a downgrade before anything is installed.
upgrade_needed() {
  if [[ ! -f "${ADMIN_CONF}" ]]; then
    log "no cluster on this host yet: kubeadm init sets it up at ${KUBERNETES_MINOR}"
    return 1
  fi
  RUNNING_MINOR="$(api_server_minor "${ADMIN_CONF}")"
  [[ -n "${RUNNING_MINOR}" ]] ||
    fatal "no gitVersion in the API server's /version answer: the server ${ADMIN_CONF} names" \
      "is not this cluster's API server; look at 'kubectl --kubeconfig=${ADMIN_CONF} get --raw" \
      "/version' on this host"
  check_one_minor_step "${RUNNING_MINOR}" "the control plane"
  if [[ "${RUNNING_MINOR}" == "${KUBERNETES_MINOR}" ]]; then
    log "control plane already runs ${KUBERNETES_MINOR}, nothing to upgrade"
    return 1
  fi
  log "control plane runs ${RUNNING_MINOR}: upgrading it to ${KUBERNETES_MINOR}"
}

install_kubeadm() {
  upgrade_kubeadm_package
  TARGET_VERSION="$(kubeadm version -o short)"
}

plan_upgrade() {
  timeout -k 10 "${APPLY_TIMEOUT_SECONDS:-900}" kubeadm upgrade plan "${TARGET_VERSION}" >&2 ||
    fatal "kubeadm upgrade plan ${TARGET_VERSION} refused the upgrade (its output is above)"
}

apply_upgrade() {
  timeout -k 30 "${APPLY_TIMEOUT_SECONDS:-900}" \
    kubeadm upgrade apply --yes "${TARGET_VERSION}" >&2 ||
    fatal "kubeadm upgrade apply ${TARGET_VERSION} failed; kubeadm rolls back a failed apply." \
      "Look at its output above and 'crictl ps -a' on this host, then pulumi up again"
}

install_kubelet() {
  upgrade_kubelet_package
}

verify_upgrade() {
  local running
  wait_for_api "${API_WAIT_SECONDS:-300}" ||
    fatal "API server not ready ${API_WAIT_SECONDS:-300}s after kubeadm upgrade apply;" \
      "look at 'journalctl -u kubelet' and 'crictl ps -a' on this host"
  running="$(api_server_minor "${ADMIN_CONF}")"
  [[ "${running}" == "${KUBERNETES_MINOR}" ]] ||
    fatal "API server reports ${running} after the upgrade, ${KUBERNETES_MINOR} expected: the" \
      "kubelet did not restart the kube-apiserver static pod; look at 'crictl ps -a' and" \
      "'journalctl -u kubelet' on this host, then pulumi up again"
  log "control plane upgraded to ${TARGET_VERSION}"
}

main() {
  init_script upgrade-control-plane
  check_inputs
  make_temp_dir
  upgrade_needed || return 0
  run_steps \
    install_kubeadm \
    plan_upgrade \
    apply_upgrade \
    install_kubelet \
    verify_upgrade
}

main "$@"
