#!/usr/bin/env bash
# install-kube-tools.sh: kubelet, kubeadm, kubectl and cri-tools (crictl) of one Kubernetes
# minor from pkgs.k8s.io, plus the host settings kubeadm checks (swap off, br_netfilter,
# overlay, bridge netfilter and IP forwarding).
#
# On a worker node that has joined already with the kubelet of an older minor (a roll drained
# it first), it moves the node as kubeadm's procedure for worker nodes says ("Upgrading Linux
# nodes", kubernetes.io/docs/tasks/administer-cluster/kubeadm/upgrading-linux-nodes/): kubeadm of
# the new minor, `kubeadm upgrade node`, then kubelet and kubectl. It refuses to move a kubelet
# past its API server. A control-plane host is upgraded by upgrade-control-plane.sh instead.
#
# It prints nothing on stdout: a join token's lifetime is the program's own clock, never the
# node's (docs/decisions/057-a-join-token-is-minted-when-a-node-must-join.md).
#
# Inputs:
#   KUBERNETES_MINOR  e.g. 1.35; never newer than the API server (required)
#   SANDBOX_IMAGE     the pause image install-runtime.sh gave containerd (optional): checked
#                     against the one this kubeadm expects (`kubeadm config images list`)
#   UPGRADE_TIMEOUT_SECONDS  bound on kubeadm upgrade node (default 600)
#   (plus the tunables listed in lib/common.sh)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

# cri-tools (crictl, the runtime's debugging CLI every failure hint names) is installed and held
# at the same minor: kubeadm 1.32 and later no longer depend on it (kubernetes/release
# cmd/krel/templates/latest/metadata.yaml: kubeadm ">= 1.32.0" has no dependencies,
# kubernetes/kubernetes#124685), and pkgs.k8s.io's repository of each minor carries its release.
KUBE_PACKAGES="kubelet kubeadm kubectl cri-tools"
KUBELET_CONF=/etc/kubernetes/kubelet.conf
ADMIN_CONF=/etc/kubernetes/admin.conf

check_inputs() {
  require_vars KUBERNETES_MINOR
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
}

disable_swap() {
  swapoff -a
  if [[ ! -f /etc/fstab ]]; then
    return 0
  fi
  # Comment out entries whose type (third field) is swap; leave every other line as is.
  awk '!/^[[:space:]]*#/ && $3 == "swap" { print "# " $0 " # disabled by gpu-cluster: kubelet"; next }
       { print }' /etc/fstab | write_file_if_changed /etc/fstab >/dev/null
}

load_kernel_modules() {
  printf '%s\n' overlay br_netfilter |
    write_file_if_changed /etc/modules-load.d/kubernetes.conf >/dev/null
  ensure_kernel_module overlay
  ensure_kernel_module br_netfilter
}

set_sysctls() {
  write_file_if_changed /etc/sysctl.d/99-kubernetes.conf >/dev/null <<'CONF'
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1
CONF
  ensure_sysctl net.bridge.bridge-nf-call-iptables 1
  ensure_sysctl net.bridge.bridge-nf-call-ip6tables 1
  ensure_sysctl net.ipv4.ip_forward 1
}

# upgrade_needed: true on a joined worker whose kubelet is of an older minor (and says why not).
upgrade_needed() {
  local kubelet server
  if [[ ! -f "${KUBELET_CONF}" ]]; then
    log "not joined yet: kubeadm join configures kubelet ${KUBERNETES_MINOR}"
    return 1
  fi
  if [[ -f "${ADMIN_CONF}" ]]; then
    log "a control-plane host: upgrade-control-plane.sh moves it"
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

upgrade_joined_node() {
  upgrade_needed || return 0
  upgrade_kubeadm_package
  timeout -k 10 "${UPGRADE_TIMEOUT_SECONDS:-600}" kubeadm upgrade node >&2 ||
    fatal "kubeadm upgrade node failed (its output is above); the node stays drained"
  upgrade_kubelet_package
}

install_kube_packages() {
  local packages=()
  read -r -a packages <<<"${KUBE_PACKAGES}"
  apt_install_held "${KUBERNETES_MINOR}.*" "${packages[@]}"
  enable_kubelet
}

# kubelet restarts in a loop until kubeadm join writes its config; that is expected.
enable_kubelet() {
  if systemctl is-enabled --quiet kubelet; then
    log "kubelet already enabled"
  else
    systemctl enable kubelet
  fi
}

verify_kube_tools() {
  local found
  found="$(kubeadm version -o short)"
  [[ "${found}" == "v${KUBERNETES_MINOR}."* ]] ||
    fatal "kubeadm v${KUBERNETES_MINOR}.x expected, found ${found}"
  log "kubeadm ${found}"
  [[ -n "${SANDBOX_IMAGE:-}" ]] || return 0
  local pause
  pause="$(kubeadm config images list --kubernetes-version "${found}" 2>/dev/null |
    awk -F/ '$NF ~ /^pause:/ { print; exit }')"
  [[ "${pause}" == "${SANDBOX_IMAGE}" ]] ||
    fatal "kubeadm ${found} expects the sandbox image ${pause:-(none listed)}, containerd has" \
      "${SANDBOX_IMAGE} (components/hosts/pins.py PAUSE_IMAGES)"
  log "sandbox image ${pause} as kubeadm expects"
}

main() {
  init_script kube-tools
  check_inputs
  make_temp_dir
  run_steps \
    disable_swap \
    load_kernel_modules \
    set_sysctls \
    add_kubernetes_apt_repo \
    upgrade_joined_node \
    install_kube_packages \
    verify_kube_tools
}

main "$@"
