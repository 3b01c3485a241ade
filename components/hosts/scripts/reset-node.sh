#!/usr/bin/env bash
# reset-node.sh: undo kubeadm join on this host (run after the node was drained and
# deleted from the cluster). Succeeds without doing anything on a host that never
# joined or was reset already: teardown must not fail on a clean host.
#
# Inputs (optional):
#   RESET_TIMEOUT_SECONDS  bound on kubeadm reset (default 300)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

CNI_CONFIG_DIR=/etc/cni/net.d
# What kubeadm reset leaves of the pod network (its own output says it does not clean CNI):
# the host-local IPAM allocations of the old pod range, and flannel's bridge and VXLAN device,
# which keep the old range's addresses so a re-join with a new range fails.
CNI_STATE_DIR=/var/lib/cni
CNI_LINKS=(cni0 flannel.1)

has_joined() {
  [[ -f /etc/kubernetes/kubelet.conf || -f /var/lib/kubelet/config.yaml ]]
}

reset_kubeadm() {
  if ! command -v kubeadm >/dev/null 2>&1; then
    log "kubeadm not installed, nothing to reset"
    return 0
  fi
  if ! has_joined; then
    log "node never joined (no kubelet config), nothing to reset"
    return 0
  fi
  timeout -k 30 "${RESET_TIMEOUT_SECONDS:-300}" kubeadm reset -f >&2
}

# kubeadm reset leaves the CNI configuration behind on purpose; a rejoin needs it gone.
clean_cni_config() {
  local entries=()
  if [[ -d "${CNI_CONFIG_DIR}" ]]; then
    mapfile -t entries < <(find "${CNI_CONFIG_DIR}" -mindepth 1 -maxdepth 1)
  fi
  if ((${#entries[@]} == 0)); then
    log "${CNI_CONFIG_DIR} already empty"
    return 0
  fi
  log "removing ${#entries[@]} entries from ${CNI_CONFIG_DIR}"
  rm -rf -- "${entries[@]}"
}

clean_cni_state() {
  if [[ -d "${CNI_STATE_DIR}" ]]; then
    log "removing ${CNI_STATE_DIR}"
    rm -rf -- "${CNI_STATE_DIR}"
  fi
  local link
  for link in "${CNI_LINKS[@]}"; do
    if ip link show "${link}" >/dev/null 2>&1; then
      log "deleting network device ${link}"
      ip link delete "${link}"
    fi
  done
}

main() {
  init_script reset
  run_steps \
    reset_kubeadm \
    clean_cni_config \
    clean_cni_state
}

main "$@"
