#!/usr/bin/env bash
# disable-nouveau.sh: keep the open-source nouveau and nova drivers off the GPUs so the NVIDIA
# driver can bind them. Blocklists them (rebuilding the initramfs only when the blocklist
# changed) and unloads them. When one is in use and cannot be unloaded, the host must reboot:
# this step stops taking new SSH connections, schedules the reboot a few seconds out and
# succeeds, so the next step (the driver) keeps dialling until the host is back, without them.
#
# It also makes sure the host boots a kernel the archive has a signed NVIDIA module for: Ubuntu
# builds linux-modules-nvidia-<branch>-server[-open]-<kernel> per kernel, and an AMI's kernel
# may be older than any the archive still carries a module for. Then the newest kernel of the
# same flavour that has one is installed and the host reboots into it (the same way as for
# nouveau), so the driver step finds a module for the running kernel.
#
# Inputs:
#   DRIVER_BRANCH         driver branch, e.g. 580 (optional: without it no kernel check)
#   KERNEL_MODULES        open or proprietary (required with DRIVER_BRANCH)
#   REBOOT_DELAY_SECONDS  how long after this step ends the host reboots (default 5)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

REBOOT_REASONS=()

check_inputs() {
  [[ "${REBOOT_DELAY_SECONDS:-5}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "REBOOT_DELAY_SECONDS must be a positive number of seconds, got '${REBOOT_DELAY_SECONDS}'"
  if [[ -n "${DRIVER_BRANCH:-}" ]]; then
    require_vars KERNEL_MODULES
    [[ "${DRIVER_BRANCH}" =~ ^[0-9]{3}$ ]] ||
      fatal "DRIVER_BRANCH must be a driver branch like 580, got '${DRIVER_BRANCH}'"
    [[ "${KERNEL_MODULES}" == open || "${KERNEL_MODULES}" == proprietary ]] ||
      fatal "KERNEL_MODULES must be open or proprietary, got '${KERNEL_MODULES}'"
  fi
}

unload_nouveau_and_nova_now() {
  if ! unload_nouveau_and_nova; then
    log "${RIVALS_IN_USE[*]} in use and cannot be unloaded (blocklisted)"
    REBOOT_REASONS+=("${RIVALS_IN_USE[*]} in use")
  fi
}

# usable_module <kernel>: the kernel's signed module of this branch and type is installed, or
# the archive has it built for a driver whose userspace the archive still offers.
usable_module() {
  local module built
  module="$(nvidia_module_package "$1")"
  [[ -n "$(installed_version "${module}")" ]] && return 0
  built="$(module_driver_version "${module}")"
  [[ -n "${built}" ]] && driver_offered "${built}"
}

# The newest kernel of the running kernel's flavour with a usable module of this branch and
# type, from the archive's package names (linux-modules-nvidia-580-server-6.8.0-1031-aws).
newest_kernel_with_module() {
  local prefix kernel
  prefix="linux-modules-nvidia-$(nvidia_suffix)-"
  while read -r kernel; do
    if usable_module "${kernel}"; then
      printf '%s\n' "${kernel}"
      return 0
    fi
  done < <(apt-cache search --names-only "^${prefix}[0-9][0-9.]*-[0-9]+-$(kernel_flavour)\$" |
    awk -v p="${prefix}" '{ sub("^" p, "", $1); print $1 }' | sort -rV)
}

# kernel_packages <running> <kernel>: what a kernel move installs: image, modules and headers
# (DKMS builds out-of-tree modules, EFA's among them, only against headers), and
# modules-extra when the running kernel has it.
kernel_packages() {
  printf '%s\n' "linux-image-$2" "linux-modules-$2" "linux-headers-$2"
  if [[ -n "$(installed_version "linux-modules-extra-$1")" ]]; then
    printf '%s\n' "linux-modules-extra-$2"
  fi
}

move_to_a_kernel_with_an_nvidia_module() {
  if [[ -z "${DRIVER_BRANCH:-}" ]]; then
    log "no driver branch given, kernel not checked"
    return 0
  fi
  refuse_transitional_branch
  local running target boots packages=()
  running="$(uname -r)"
  boots="$(newest_installed_kernel)"
  if [[ "${boots}" != "${running}" ]]; then
    # Installed since boot (first-boot unattended-upgrades, before wait-ready.sh kept it off
    # kernels): the host boots it next, so the driver must go in for it.
    usable_module "${boots}" ||
      fatal "kernel ${boots} was installed since boot and boots next, but the archive has no" \
        "$(nvidia_module_package "${boots}") built for a driver it offers: wait for Ubuntu to" \
        "publish it, or remove that kernel (apt-get purge linux-image-${boots}), then run pulumi" \
        "up again"
    log "kernel ${boots} was installed since boot and boots next: moving to it before the driver"
    mapfile -t packages < <(kernel_packages "${running}" "${boots}")
    apt_install "${packages[@]}" >/dev/null
    REBOOT_REASONS+=("kernel ${running} -> ${boots} (installed since boot)")
    return 0
  fi
  if [[ -n "$(installed_version "$(nvidia_module_package "${running}")")" ]]; then
    # Installed already: the archive moving on (it drops an old kernel's modules) moves nothing.
    log "$(nvidia_module_package "${running}") is installed for the running kernel"
    return 0
  fi
  local module built why
  module="$(nvidia_module_package "${running}")"
  built="$(module_driver_version "${module}")"
  if [[ -n "${built}" ]] && driver_offered "${built}"; then
    log "the archive has ${module} for the running kernel, built for driver ${built}"
    return 0
  fi
  if [[ -n "${built}" ]]; then
    why="the archive's ${module} is built for driver ${built}, whose userspace it no longer"
    why+=" offers (nvidia-kernel-common-${DRIVER_BRANCH}-server: $(offered_versions \
      "nvidia-kernel-common-${DRIVER_BRANCH}-server"))"
  else
    why="the archive has no ${module}"
  fi
  target="$(newest_kernel_with_module)"
  [[ -n "${target}" ]] ||
    fatal "${why}, and no linux-modules-nvidia-$(nvidia_suffix)-* of another" \
      "$(kernel_flavour) kernel is built for a driver it offers; use another driverVersion or amiId"
  if [[ "$(printf '%s\n' "${running}" "${target}" | sort -V | tail -n 1)" != "${target}" ]]; then
    fatal "${why}; the newest kernel with a usable one is ${target}, older than the running" \
      "${running}: wait for Ubuntu to publish the module for ${running}, or use an older amiId"
  fi
  log "${why}: installing kernel ${target}, the newest $(kernel_flavour) kernel with" \
    "$(nvidia_module_package "${target}") built for a driver the archive offers"
  mapfile -t packages < <(kernel_packages "${running}" "${target}")
  apt_install "${packages[@]}" >/dev/null
  REBOOT_REASONS+=("kernel ${running} -> ${target}")
}

reboot_if_needed() {
  if ((${#REBOOT_REASONS[@]} == 0)); then
    log "no reboot needed"
    return 0
  fi
  local delay="${REBOOT_DELAY_SECONDS:-5}"
  log "rebooting in ${delay}s (${REBOOT_REASONS[*]}); the next step reconnects after the reboot"
  schedule_reboot "${delay}" gpu-cluster-nouveau-reboot
}

main() {
  init_script nouveau
  check_inputs
  make_temp_dir
  run_steps \
    blocklist_nouveau_and_nova \
    unload_nouveau_and_nova_now \
    move_to_a_kernel_with_an_nvidia_module \
    reboot_if_needed
}

main "$@"
