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
#   NVLINK_SUBNET_MANAGER true on NVSwitch gen 4 (NVLink 5: p6-b200): fabric manager also needs
#                         nvlsm, libnvsdm and the mlx5_core, mlx5_ib and ib_umad modules
#                         (default false)
#   CUDA_REPOSITORY       NVIDIA's CUDA apt repository for this release, where the fabric
#                         packages come from, e.g.
#                         https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
#                         (required with NEEDS_FABRIC_MANAGER=true)
#   GSP_FIRMWARE          on (default) or off: off loads the module with
#                         NVreg_EnableGpuFirmware=0, as AWS's images do on g4dn, g5 and g5g; only
#                         the proprietary modules run without GSP firmware
#   (plus the tunables listed in lib/common.sh)
#
# Expects wait-ready.sh (package lists fresh) and disable-nouveau.sh (nouveau gone, running a
# kernel the archive has a signed module for) to have run.
#
# Exit status 3 with a line "REBOOT_REQUIRED: ..." on stderr: nouveau or nova is loaded and cannot
# be unloaded, or an older driver's module is in use; reboot the host and run this script again.
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
  [[ "${NVLINK_SUBNET_MANAGER:-false}" == true || "${NVLINK_SUBNET_MANAGER:-false}" == false ]] ||
    fatal "NVLINK_SUBNET_MANAGER must be true or false, got '${NVLINK_SUBNET_MANAGER}'"
  if [[ "${NEEDS_FABRIC_MANAGER}" == true ]]; then
    require_vars CUDA_REPOSITORY
    [[ "${CUDA_REPOSITORY}" =~ ^https://developer\.download\.nvidia\.com/compute/cuda/repos/ubuntu[0-9]{4}/x86_64/$ ]] ||
      fatal "CUDA_REPOSITORY must be NVIDIA's CUDA apt repository like" \
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/," \
        "got '${CUDA_REPOSITORY}'"
  fi
  [[ "${GSP_FIRMWARE:-on}" == on || "${GSP_FIRMWARE:-on}" == off ]] ||
    fatal "GSP_FIRMWARE must be on or off, got '${GSP_FIRMWARE}'"
  [[ "${GSP_FIRMWARE:-on}" == on || "${KERNEL_MODULES}" == proprietary ]] ||
    fatal "GSP_FIRMWARE=off needs KERNEL_MODULES=proprietary: the open kernel modules run" \
      "only with GSP firmware"
}

DRIVER_VERSION=""     # the exact upstream version, e.g. 580.95.05 (set by choose_driver_version)
DRIVER_PACKAGES=()    # pkg=version specs of the one transaction
BOOT_CHECK=/usr/local/sbin/gpu-cluster-nvidia-boot-check
BOOT_CHECK_UNIT=/etc/systemd/system/gpu-cluster-nvidia-boot-check.service
PERSISTENCED_DROP_IN=/etc/systemd/system/nvidia-persistenced.service.d/50-gpu-cluster-persistence-mode.conf
NVLSM_MODULES_CONF=/etc/modules-load.d/gpu-cluster-nvlsm.conf
CUDA_PREFERENCES=/etc/apt/preferences.d/gpu-cluster-cuda
FABRIC_PACKAGES=()    # the fabric manager first: the packages of the CUDA repository at the driver's version
DRIVER_REMOVALS=()    # "pkg-": another branch naming's fabric packages, removed in the same transaction
GSP_OPTIONS=/etc/modprobe.d/gpu-cluster-nvidia-gsp.conf
# A change of the drop-in or the module's options owes a restart or a reload (lib/common.sh
# `owe`): a run ended in between leaves it owed, and the next run does it.
PERSISTENCED_RESTART_OWED=nvidia-persistenced-restart@boot
GSP_RELOAD_OWED=nvidia-module-reload@boot
RELOAD_REASONS=()     # why an nvidia module loaded before this run must be loaded again

nvlink_subnet_manager() {
  [[ "${NVLINK_SUBNET_MANAGER:-false}" == true ]]
}

# pin <pkg>: "pkg=<DRIVER_VERSION>-*", any packaging revision of the driver's version: apt picks
# the revision, so packages that name each other's exact revision move together (a recrank of
# one driver version, LP #2129682, changed those dependencies), and fabric manager and NSCQ,
# which refuse to run unless they equal the driver, get the driver's version (gpu-driver-
# container pins them as =${DRIVER_VERSION}*). Fails naming what the archive offers.
pin() {
  local offered
  if [[ "$(installed_version "$1")" != "${DRIVER_VERSION}-"* &&
    -z "$(apt_version_for_upstream "$1" "${DRIVER_VERSION}")" ]]; then
    offered="$(offered_versions "$1")"
    fatal "$1 ${DRIVER_VERSION} wanted (the driver the running kernel's signed module is" \
      "built for), the archive has ${offered:-no version of it}"
  fi
  printf '%s=%s-*\n' "$1" "${DRIVER_VERSION}"
}

# The driver version is the one Ubuntu built the running kernel's signed module with: its
# Depends bounds nvidia-kernel-common-<branch>-server to exactly that version ("(<= X-1),
# (>= X)", linux-restricted-modules), so module, kernel common, userspace, fabric manager and
# NSCQ go in at that one version, in one transaction. The flavour metapackage
# (linux-modules-nvidia-<suffix>-aws) is left out: it pulls the newest kernel and its module.
# Once installed, the installed module's version is kept (a re-run upgrades nothing).
choose_driver_version() {
  local kernel module spec depends common pkg
  kernel="$(uname -r)"
  module="$(nvidia_module_package "${kernel}")"
  # The installed build is kept, also once the archive replaced it.
  depends="$(package_depends "${module}")" ||
    fatal "the archive has no ${module} for the running kernel ${kernel}; the nouveau step" \
      "moves the host to the newest kernel with one: run pulumi up again"
  spec="${module}=$(installed_version "${module}")"
  read -r common DRIVER_VERSION < <(tr ',' '\n' <<<"${depends}" |
    sed -nE 's/^ *(nvidia-kernel-common-[0-9a-z-]+) \(>= ([^)]+)\).*/\1 \2/p' |
    awk 'NR == 1') || :
  [[ "${DRIVER_VERSION}" == "${DRIVER_BRANCH}."* ]] ||
    fatal "${module} is not built for a ${DRIVER_BRANCH} driver (Depends: ${depends:-none})"
  if [[ "${spec}" == *= ]]; then
    spec="${module}=$(apt_field "${module}" Version)"
  fi
  DRIVER_PACKAGES=("${spec}")
  # The userspace NVIDIA's driver container installs from the same archive, video decode and
  # encode (NVDEC, NVENC) included (gpu-driver-container ubuntu24.04/precompiled/nvidia-driver,
  # `_install_driver`).
  for pkg in "${common}" "nvidia-headless-no-dkms-$(nvidia_suffix)" \
    "nvidia-utils-${DRIVER_BRANCH}-server" "libnvidia-decode-${DRIVER_BRANCH}-server" \
    "libnvidia-encode-${DRIVER_BRANCH}-server"; do
    DRIVER_PACKAGES+=("$(pin "${pkg}")")
  done
  modules_for_kernels_booted_next "${kernel}"
  if [[ "${NEEDS_FABRIC_MANAGER}" == true ]]; then
    choose_fabric_packages
  fi
  log "driver ${DRIVER_VERSION} for kernel ${kernel}"
}

# modules_for_kernels_booted_next <running kernel>: a kernel newer than the running one that is
# installed already boots next: it gets its signed module of this driver in the same
# transaction, or the step fails naming it (the module for the running kernel only would leave
# the next boot without GPUs).
modules_for_kernels_booted_next() {
  local other module spec built
  for other in $(installed_kernels); do
    [[ "${other}" != "$1" && "$(printf '%s\n' "$1" "${other}" | sort -V | tail -n 1)" == "${other}" ]] ||
      continue
    module="$(nvidia_module_package "${other}")"
    spec="${module}=$(installed_version "${module}")"
    [[ "${spec}" != *= ]] || spec="${module}=$(apt_field "${module}" Version)" || :
    built="$({ package_depends "${module}" || :; } | tr ',' '\n' |
      sed -nE 's/^ *nvidia-kernel-common-[0-9a-z-]+ \(>= ([^)]+)\).*/\1/p' | awk 'NR == 1')"
    [[ "${built}" == "${DRIVER_VERSION}" ]] ||
      fatal "kernel ${other} is installed and boots next, but the archive's ${module} is built" \
        "for driver ${built:-(none: no such package)}, not ${DRIVER_VERSION}: the node would boot" \
        "it without GPUs. Remove it (apt-get purge linux-image-${other}) or let the nouveau" \
        "step move the host to it (re-run <node>-nouveau), then run pulumi up again"
    log "kernel ${other} is installed and boots next: its module goes in too"
    DRIVER_PACKAGES+=("${spec}")
  done
}

# fabric_name <name>: a fabric package's name for DRIVER_BRANCH: from branch 580 NVIDIA's CUDA
# repository names them without the branch, before with it (gpu-driver-container
# ubuntu24.04/precompiled/nvidia-driver fabricmanager_install, nscq_install, nvsdm_install).
fabric_name() {
  if ((DRIVER_BRANCH >= 580)); then
    printf '%s\n' "$1"
  else
    printf '%s-%s\n' "$1" "${DRIVER_BRANCH}"
  fi
}

# Fabric manager and NSCQ (NVSwitch), with NVLink 5 also NVSDM and nvlsm, come from NVIDIA's CUDA
# repository; apt takes only these packages from it, only at the driver's version.
choose_fabric_packages() {
  local name old
  FABRIC_PACKAGES=("$(fabric_name nvidia-fabricmanager)" "$(fabric_name libnvidia-nscq)")
  if nvlink_subnet_manager && ((DRIVER_BRANCH >= 560)); then
    FABRIC_PACKAGES+=("$(fabric_name libnvsdm)")
  fi
  add_signed_apt_repo cuda "${CUDA_REPOSITORY}3bf863cc.pub" "${CUDA_KEY_FINGERPRINT}" \
    "${CUDA_REPOSITORY} /"
  write_file_if_changed "${CUDA_PREFERENCES}" >/dev/null <<PREFERENCES
# Written by gpu-cluster (install-driver.sh): NVIDIA's CUDA repository gives this host its
# fabric packages at driver ${DRIVER_VERSION} and nothing else.
Package: ${FABRIC_PACKAGES[*]}
Pin: version ${DRIVER_VERSION}-*
Pin-Priority: 600

Package: nvlsm
Pin: origin developer.download.nvidia.com
Pin-Priority: 600

Package: *
Pin: origin developer.download.nvidia.com
Pin-Priority: -1
PREFERENCES
  for name in "${FABRIC_PACKAGES[@]}"; do
    DRIVER_PACKAGES+=("$(pin "${name}")")
    # The other naming of the same package (a branch change across 580, or Ubuntu's archive
    # of earlier releases) ships the same files: it goes in the same transaction.
    old="${name}-${DRIVER_BRANCH}"
    ((DRIVER_BRANCH >= 580)) || old="${name%-"${DRIVER_BRANCH}"}"
    if [[ -n "$(installed_version "${old}")" ]]; then
      DRIVER_REMOVALS+=("${old}-")
    fi
  done
  if nvlink_subnet_manager; then
    # nvlsm is versioned on its own (gpu-driver-container installs it unpinned): the installed
    # version, else the candidate, recorded and held.
    name="$(installed_version nvlsm)"
    if [[ -z "${name}" ]]; then
      name="$(apt_field nvlsm Version)" ||
        fatal "nvlsm is not in NVIDIA's CUDA repository for this release (${CUDA_REPOSITORY})"
    fi
    DRIVER_PACKAGES+=("nvlsm=${name}")
  fi
}

# The nouveau step (disable-nouveau.sh) normally did this and rebooted when needed; run alone,
# this script cannot reboot itself, so it says so.
block_nouveau() {
  blocklist_nouveau_and_nova
  if ! unload_nouveau_and_nova; then
    printf 'REBOOT_REQUIRED: %s loaded and could not be unloaded; %s\n' "${RIVALS_IN_USE[*]}" \
      "blocklisted now, so reboot the host and run install-driver.sh again" >&2
    exit "${EXIT_REBOOT_REQUIRED}"
  fi
}

install_driver_packages() {
  local module="${DRIVER_PACKAGES[0]%%=*}" before
  before="$(installed_version "${module}")"
  apt_install_together "${DRIVER_PACKAGES[@]}" "${DRIVER_REMOVALS[@]}" >/dev/null
  apt_hold "${DRIVER_PACKAGES[@]%%=*}"
  if [[ "$(installed_version "${module}")" != "${before}" ]]; then
    RELOAD_REASONS+=("${module} ${before:-not installed} -> $(installed_version "${module}")")
  fi
}

# Kernel and driver move together: unattended-upgrades would install a new kernel (through the
# flavour metapackages) with no module of this driver, and the next boot would have no GPUs.
# Hold the installed kernel metapackages, keep unattended-upgrades off kernel and NVIDIA
# packages (wait-ready.sh did both already on GPU nodes), hold the flavour's module metapackage
# when a host has it, and check at every boot that the running kernel has a working module.
keep_kernel_and_driver_together() {
  keep_kernel_with_the_driver
  hold_installed "linux-modules-nvidia-$(nvidia_suffix)-$(kernel_flavour)"
  install_boot_check
}

# The check is required by kubelet (RequiredBy= makes kubelet.service Require= it, ordered
# Before= it, systemd.unit(5)): when the running kernel has no working module, kubelet does not
# start and the node goes NotReady, instead of Ready with no GPUs.
install_boot_check() {
  local changed
  changed="$(write_file_if_changed "${BOOT_CHECK}" 0755 <<'CHECK'
#!/usr/bin/env bash
# Written by gpu-cluster: at boot, fail loudly when the running kernel has no NVIDIA module
# (a kernel installed without its signed module leaves the node Ready with 0 GPUs). The
# result is kept in /var/lib/gpu-cluster/nvidia-boot-check for the node's validation.
set -uo pipefail
kernel="$(uname -r)"
status=/var/lib/gpu-cluster/nvidia-boot-check
mkdir -p "$(dirname "${status}")"
if ! modinfo -k "${kernel}" nvidia >/dev/null 2>&1; then
  echo "failed ${kernel}: no nvidia kernel module for the running kernel" >"${status}"
  echo "gpu-cluster: no NVIDIA kernel module for the running kernel ${kernel}; install its linux-modules-nvidia-* package or boot the kernel the driver step installed" >&2
  exit 1
fi
if ! report="$(nvidia-smi -L 2>&1)"; then
  echo "failed ${kernel}: nvidia-smi: ${report}" >"${status}"
  echo "gpu-cluster: nvidia-smi fails on kernel ${kernel}: ${report}" >&2
  exit 1
fi
echo "ok ${kernel}" >"${status}"
CHECK
)"
  changed+="$(write_file_if_changed "${BOOT_CHECK_UNIT}" <<UNIT
[Unit]
Description=gpu-cluster: the running kernel has a working NVIDIA kernel module
After=systemd-modules-load.service nvidia-persistenced.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=${BOOT_CHECK}

[Install]
WantedBy=multi-user.target
RequiredBy=kubelet.service
UNIT
)"
  if [[ "${changed}" == *changed* ]]; then
    systemctl daemon-reload
  fi
  # Enabled again when the unit changed: `enable` creates the kubelet.service.requires/ link.
  if systemctl is-enabled --quiet gpu-cluster-nvidia-boot-check && [[ "${changed}" != *changed* ]]; then
    log "boot check already enabled"
  else
    systemctl enable gpu-cluster-nvidia-boot-check
  fi
}

# GSP firmware off (GSP_FIRMWARE=off): the module option AWS's images set on g4dn, g5 and g5g
# (amazon-eks-ami templates/al2023/runtime/gpu/nvidia-kmod-load.sh, disable-gsp); it takes
# effect when the module loads.
set_module_options() {
  if [[ "${GSP_FIRMWARE:-on}" == off ]]; then
    write_file_owing "${GSP_OPTIONS}" "${GSP_RELOAD_OWED}" <<'CONF'
# Written by gpu-cluster (install-driver.sh): no GSP firmware on this instance type.
options nvidia NVreg_EnableGpuFirmware=0
CONF
  elif [[ -e "${GSP_OPTIONS}" ]]; then
    owe "${GSP_RELOAD_OWED}"
    rm -f -- "${GSP_OPTIONS}"
  fi
  if owed "${GSP_RELOAD_OWED}"; then
    RELOAD_REASONS+=("GSP firmware ${GSP_FIRMWARE:-on}")
  fi
}

load_driver() {
  local loaded=false
  module_loaded nvidia && loaded=true
  set_module_options
  ensure_kernel_module nvidia
  reload_after_branch_change
  if [[ "${loaded}" == true ]] && ((${#RELOAD_REASONS[@]} > 0)); then
    reload_nvidia_module "${RELOAD_REASONS[*]}" "must be loaded again (${RELOAD_REASONS[*]})"
  fi
  # The module now runs with the options on disk (loaded fresh, or again).
  settle "${GSP_RELOAD_OWED}"
  enable_persistence_mode
  if nvlink_subnet_manager; then
    load_nvlink5_modules
  fi
  if [[ "${NEEDS_FABRIC_MANAGER}" == true ]] && ! enable_service nvidia-fabricmanager; then
    fabric_manager_journal
    fatal "nvidia-fabricmanager did not start (its journal is above)"
  fi
}

# NVLSM talks to the NVSwitch trays through the ConnectX ports: gpu-driver-container waits for
# mlx5_core and ib_umad before it starts fabric manager on NVLink5+ systems, EKS's AMI loads
# ib_umad at boot. On AWS kernels they may live in linux-modules-extra. Beside nvlsm go the
# InfiniBand diagnostics and the user-space umad library, as NVIDIA's Ubuntu driver container
# (ubuntu24.04/precompiled/nvidia-driver `nvlink5_pkgs_install`: nvlsm, infiniband-diags) and
# the EKS AL2023 image (templates/al2023/provisioners/install-nvidia-driver.sh: libibumad,
# infiniband-diags, nvlsm) install them: Ubuntu's rdma-core names them infiniband-diags and
# libibumad3, versioned on their own (unpinned, as both install them).
load_nvlink5_modules() {
  local kernel module
  kernel="$(uname -r)"
  apt_install infiniband-diags libibumad3 >/dev/null
  if [[ -z "$(installed_version "linux-modules-extra-${kernel}")" ]] &&
    apt_field "linux-modules-extra-${kernel}" Version >/dev/null; then
    apt_install "linux-modules-extra-${kernel}" >/dev/null
  fi
  printf '%s\n' mlx5_core mlx5_ib ib_umad |
    write_file_if_changed "${NVLSM_MODULES_CONF}" >/dev/null
  for module in mlx5_core mlx5_ib ib_umad; do
    module_loaded "${module}" || modprobe "${module}" ||
      fatal "kernel module ${module} (NVLink 5 subnet manager) does not load on ${kernel}:" \
        "its package (linux-modules-extra-${kernel}) is not in the archive or not installed"
  done
}

fabric_manager_journal() {
  log "nvidia-fabricmanager journal (journalctl -u nvidia-fabricmanager -b):"
  journalctl -u nvidia-fabricmanager -b --no-pager -n 50 >&2 ||
    log "journalctl could not read the journal"
}

# Persistence mode keeps the driver initialised without a client (no per-job init delay, no
# lost state between pods). Ubuntu's nvidia-persistenced unit starts the daemon with
# --no-persistence-mode; this drop-in starts it with --persistence-mode.
enable_persistence_mode() {
  write_file_owing "${PERSISTENCED_DROP_IN}" "${PERSISTENCED_RESTART_OWED}" <<'UNIT'
# Written by gpu-cluster: persistence mode on every GPU.
[Service]
ExecStart=
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose
UNIT
  if owed "${PERSISTENCED_RESTART_OWED}"; then
    systemctl daemon-reload
  fi
  enable_service nvidia-persistenced
  if owed "${PERSISTENCED_RESTART_OWED}"; then
    log "restarting nvidia-persistenced on its drop-in"
    systemctl restart nvidia-persistenced
    settle "${PERSISTENCED_RESTART_OWED}"
  else
    log "nvidia-persistenced: no change, not restarting"
  fi
}

# After a branch change the old kernel module stays loaded until it is unloaded or the host
# reboots, and nvidia-smi fails with "Driver/library version mismatch". Unload and load it;
# when GPU processes hold it, the node must be drained and rebooted instead.
reload_after_branch_change() {
  local report
  if report="$(timeout -k 10 120 nvidia-smi -L 2>&1)" || [[ "${report}" != *"version mismatch"* ]]; then
    return 0
  fi
  reload_nvidia_module "driver ${DRIVER_BRANCH} installed while an older kernel module is loaded" \
    "is older than driver ${DRIVER_BRANCH}"
  RELOAD_REASONS=()
}

# reload_nvidia_module <why> <what it is>: unload the loaded nvidia module and load the
# installed one with its options now; when GPU processes hold it, the node must be drained and
# rebooted instead.
reload_nvidia_module() {
  local unit module
  log "$1: reloading it"
  for unit in nvidia-fabricmanager nvidia-persistenced; do
    if systemctl is-active --quiet "${unit}"; then
      systemctl stop "${unit}"
    fi
  done
  for module in nvidia_uvm nvidia_drm nvidia_modeset nvidia; do
    if module_loaded "${module}" && ! modprobe -r "${module}"; then
      printf 'REBOOT_REQUIRED: the loaded nvidia kernel module %s and is in use (GPU workloads on this node); drain the node (kubectl drain <node> --ignore-daemonsets --delete-emptydir-data), reboot it, then run pulumi up again\n' \
        "$2" >&2
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
  if [[ "$(grep -c . <<<"${versions}")" -ne 1 || "${version}" != "${DRIVER_VERSION}" ]]; then
    fatal "driver ${DRIVER_VERSION} (branch ${DRIVER_BRANCH}) wanted, nvidia-smi reports" \
      "${versions//$'\n'/, }"
  fi
  if ((count != GPU_COUNT)); then
    fatal "${GPU_COUNT} GPUs expected for this instance type, nvidia-smi lists ${count}:"$'\n'"${report}"
  fi
  verify_gsp_firmware
  log "driver ${version}, ${count} GPU(s)"
}

# nvidia-smi -q reports "GSP Firmware Version : N/A" for a GPU that runs without it.
verify_gsp_firmware() {
  [[ "${GSP_FIRMWARE:-on}" == off ]] || return 0
  local running
  running="$(timeout -k 10 120 nvidia-smi -q |
    awk -F': *' '/GSP Firmware Version/ && $2 != "N/A" { n++ } END { print n + 0 }')"
  ((running == 0)) ||
    fatal "GSP firmware off expected (${GSP_OPTIONS}), nvidia-smi -q reports it running on" \
      "${running} GPU(s): the module was loaded before the option; reboot the node"
}

verify_persistence_mode() {
  local modes
  modes="$(timeout -k 10 120 nvidia-smi --query-gpu=persistence_mode --format=csv,noheader |
    sort | uniq -c | awk '{ $1 = $1; print }' | paste -sd, -)"
  [[ "${modes}" == "${GPU_COUNT} Enabled" ]] ||
    fatal "persistence mode Enabled on ${GPU_COUNT} GPU(s) expected, nvidia-smi reports ${modes}"
  log "persistence mode on"
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
  fabric="$(installed_version "${FABRIC_PACKAGES[0]}")"
  [[ "${fabric%%-*}" == "${driver}" ]] ||
    fatal "fabric manager must match driver ${driver}, ${FABRIC_PACKAGES[0]} is ${fabric:-not installed}"
  if ! state="$(systemctl is-active nvidia-fabricmanager)"; then
    fabric_manager_journal
    fatal "nvidia-fabricmanager expected active, systemctl reports '${state}' (journal above)"
  fi
  log "fabric manager ${fabric%%-*} active"
}

main() {
  init_script driver
  check_inputs
  make_temp_dir
  run_steps \
    block_nouveau \
    refuse_transitional_branch \
    choose_driver_version \
    install_driver_packages \
    keep_kernel_and_driver_together \
    load_driver \
    verify_gpus \
    verify_persistence_mode \
    verify_fabric_manager
}

main "$@"
