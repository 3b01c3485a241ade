#!/usr/bin/env bash
# install-driver.sh: the NVIDIA driver of one pinned branch, from Ubuntu's archive
# (Canonical's precompiled, signed kernel modules; no DKMS build on the host).
#
# Inputs:
#   DRIVER_BRANCH         driver branch, e.g. 580 (required)
#   GPU_COUNT             GPUs nvidia-smi must list, from the instance catalog (required)
#   NEEDS_FABRIC_MANAGER  true on NVSwitch types (p4d, p4de, p5*, p6), else false (required)
#   KERNEL_MODULES        open or proprietary: the kernel module type the GPU needs, from the
#                         catalog (open on Turing and newer, required on Blackwell;
#                         proprietary on Volta) (required)
#   KERNEL_FLAVOUR        kernel flavour of the linux-modules-nvidia-* metapackage that
#                         follows kernel updates, default from `uname -r`
#                         (6.8.0-1021-aws -> aws)
#   (plus the tunables listed in lib/common.sh)
#
# Expects wait-ready.sh to have run (cloud-init done, package lists fresh).
#
# Exit status 3 with a line "REBOOT_REQUIRED: ..." on stderr: nouveau is loaded and
# cannot be unloaded; reboot the host and run this script again.
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

EXIT_REBOOT_REQUIRED=3

check_inputs() {
  require_vars DRIVER_BRANCH GPU_COUNT NEEDS_FABRIC_MANAGER KERNEL_MODULES
  [[ "${DRIVER_BRANCH}" =~ ^[0-9]{3}$ ]] ||
    fatal "DRIVER_BRANCH must be a driver branch like 580, got '${DRIVER_BRANCH}'"
  [[ "${GPU_COUNT}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "GPU_COUNT must be a positive integer, got '${GPU_COUNT}'"
  [[ "${NEEDS_FABRIC_MANAGER}" == true || "${NEEDS_FABRIC_MANAGER}" == false ]] ||
    fatal "NEEDS_FABRIC_MANAGER must be true or false, got '${NEEDS_FABRIC_MANAGER}'"
  [[ "${KERNEL_MODULES}" == open || "${KERNEL_MODULES}" == proprietary ]] ||
    fatal "KERNEL_MODULES must be open or proprietary, got '${KERNEL_MODULES}'"
}

# driver_suffix: 580-server (proprietary modules) or 580-server-open, as in Ubuntu's package
# names (gpu-driver-container `ubuntu24.04/precompiled/nvidia-driver`, `_install_driver`:
# linux-modules-nvidia-${DRIVER_BRANCH}-server-open-${KERNEL_VERSION} for kernel-open).
driver_suffix() {
  if [[ "${KERNEL_MODULES}" == open ]]; then
    printf '%s-server-open\n' "${DRIVER_BRANCH}"
  else
    printf '%s-server\n' "${DRIVER_BRANCH}"
  fi
}

kernel_flavour() {
  if [[ -n "${KERNEL_FLAVOUR:-}" ]]; then
    printf '%s\n' "${KERNEL_FLAVOUR}"
  else
    # 6.8.0-1021-aws -> aws; 6.8.0-60-generic -> generic
    uname -r | cut -d- -f3-
  fi
}

# Ubuntu's package set (documentation.ubuntu.com/server, "NVIDIA drivers installation"):
# - linux-modules-nvidia-<suffix>-$(uname -r): the signed module for the running kernel. The
#   flavour metapackage alone depends on the newest kernel of the flavour, which is not the
#   AMI's running kernel once the archive has moved on: modprobe would then find no module.
# - linux-modules-nvidia-<suffix>-<flavour>: keeps the module coming with kernel updates.
# - nvidia-utils-<branch>-server: one package for both flavours (there is no -server-open).
driver_packages() {
  local suffix
  suffix="$(driver_suffix)"
  printf '%s\n' \
    "linux-modules-nvidia-${suffix}-$(uname -r)" \
    "linux-modules-nvidia-${suffix}-$(kernel_flavour)" \
    "nvidia-headless-no-dkms-${suffix}" \
    "nvidia-utils-${DRIVER_BRANCH}-server"
}

fabric_manager_packages() {
  printf '%s\n' "nvidia-fabricmanager-${DRIVER_BRANCH}" "libnvidia-nscq-${DRIVER_BRANCH}"
}

# The nouveau step (disable-nouveau.sh) normally did this and rebooted when needed; run alone,
# this script cannot reboot itself, so it says so.
block_nouveau() {
  blocklist_nouveau
  if ! unload_nouveau; then
    printf 'REBOOT_REQUIRED: nouveau is loaded and could not be unloaded; %s\n' \
      "it is blocklisted now, so reboot the host and run install-driver.sh again" >&2
    exit "${EXIT_REBOOT_REQUIRED}"
  fi
}

install_driver_packages() {
  local packages=()
  mapfile -t packages < <(driver_packages)
  apt_install "${packages[@]}" >/dev/null
  apt_hold "${packages[@]}"
}

install_fabric_manager() {
  if [[ "${NEEDS_FABRIC_MANAGER}" != true ]]; then
    log "no NVSwitch on this instance type, fabric manager not needed"
    return 0
  fi
  local packages=()
  mapfile -t packages < <(fabric_manager_packages)
  apt_install "${packages[@]}" >/dev/null
  apt_hold "${packages[@]}"
}

load_driver() {
  ensure_kernel_module nvidia
  reload_after_branch_change
  if [[ "${NEEDS_FABRIC_MANAGER}" == true ]]; then
    enable_service nvidia-fabricmanager
  fi
}

# After a branch change the old kernel module stays loaded until it is unloaded or the host
# reboots, and nvidia-smi fails with "Driver/library version mismatch". Unload and load it;
# when GPU processes hold it, the node must be drained and rebooted instead.
reload_after_branch_change() {
  local report unit module
  if report="$(timeout -k 10 120 nvidia-smi -L 2>&1)" || [[ "${report}" != *"version mismatch"* ]]; then
    return 0
  fi
  log "driver ${DRIVER_BRANCH} installed while an older kernel module is loaded: reloading it"
  for unit in nvidia-fabricmanager nvidia-persistenced; do
    if systemctl is-active --quiet "${unit}"; then
      systemctl stop "${unit}"
    fi
  done
  for module in nvidia_uvm nvidia_drm nvidia_modeset nvidia; do
    if module_loaded "${module}" && ! modprobe -r "${module}"; then
      printf 'REBOOT_REQUIRED: the loaded nvidia kernel module is older than driver %s and is in use (GPU workloads on this node); drain the node (kubectl drain <node> --ignore-daemonsets --delete-emptydir-data), reboot it, then run pulumi up again\n' \
        "${DRIVER_BRANCH}" >&2
      exit "${EXIT_REBOOT_REQUIRED}"
    fi
  done
  modprobe nvidia
}

verify_gpus() {
  local report versions count version
  report="$(timeout -k 10 120 nvidia-smi --query-gpu=index,name,driver_version \
    --format=csv,noheader 2>&1)" ||
    fatal "nvidia-smi failed; the nvidia kernel module did not load: ${report}"
  count="$(grep -c . <<<"${report}")"
  versions="$(awk -F', ' '{ print $3 }' <<<"${report}" | sort -u)"
  version="$(head -n1 <<<"${versions}")"
  if [[ "$(grep -c . <<<"${versions}")" -ne 1 || "${version}" != "${DRIVER_BRANCH}."* ]]; then
    fatal "driver ${DRIVER_BRANCH} wanted, nvidia-smi reports ${versions//$'\n'/, }"
  fi
  if ((count != GPU_COUNT)); then
    fatal "${GPU_COUNT} GPUs expected for this instance type, nvidia-smi lists ${count}:"$'\n'"${report}"
  fi
  log "driver ${version}, ${count} GPU(s)"
}

# Fabric manager refuses to start unless its version is exactly the driver's; without
# it CUDA fails with error 802 on NVSwitch systems while nvidia-smi looks fine.
verify_fabric_manager() {
  if [[ "${NEEDS_FABRIC_MANAGER}" != true ]]; then
    log "not needed"
    return 0
  fi
  local driver fabric state
  # awk reads to the end: head would close the pipe early and pipefail reports SIGPIPE.
  driver="$(timeout -k 10 120 nvidia-smi --query-gpu=driver_version --format=csv,noheader |
    awk 'NR == 1')"
  fabric="$(installed_version "nvidia-fabricmanager-${DRIVER_BRANCH}")"
  [[ "${fabric%%-*}" == "${driver}" ]] ||
    fatal "fabric manager must match driver ${driver}, nvidia-fabricmanager-${DRIVER_BRANCH} is ${fabric:-not installed}"
  state="$(systemctl is-active nvidia-fabricmanager)" ||
    fatal "nvidia-fabricmanager expected active, systemctl reports '${state}'"
  log "fabric manager ${fabric%%-*} active"
}

main() {
  init_script driver
  check_inputs
  make_temp_dir
  run_steps \
    block_nouveau \
    install_driver_packages \
    install_fabric_manager \
    load_driver \
    verify_gpus \
    verify_fabric_manager
}

main "$@"
