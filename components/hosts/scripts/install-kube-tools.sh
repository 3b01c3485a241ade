#!/usr/bin/env bash
# install-kube-tools.sh: kubelet, kubeadm and kubectl of one Kubernetes minor from
# pkgs.k8s.io, plus the host settings kubeadm checks (swap off, br_netfilter,
# overlay, bridge netfilter and IP forwarding).
#
# Inputs:
#   KUBERNETES_MINOR  e.g. 1.35; never newer than the API server (required)
#   SANDBOX_IMAGE     the pause image install-runtime.sh gave containerd (optional): checked
#                     against the one this kubeadm expects (`kubeadm config images list`)
#   (plus the tunables listed in lib/common.sh)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

KUBE_PACKAGES="kubelet kubeadm kubectl"

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
      "${SANDBOX_IMAGE} (components/host_pins.py PAUSE_IMAGES)"
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
    install_kube_packages \
    verify_kube_tools
}

main "$@"
