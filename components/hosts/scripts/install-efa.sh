#!/usr/bin/env bash
# install-efa.sh: the EFA software on a node launched with EFA interfaces: AWS's EFA installer
# (EFA kernel driver, rdma-core, libfabric with the efa provider, and the NCCL network plugin
# aws-ofi-nccl, which the installer ships as libnccl-ofi), then proof that libfabric sees every
# EFA interface the instance type has (`fi_info -p efa`), and unlimited locked memory for the
# containers (EFA registers the buffers NCCL sends from).
#
# The installer runs only after its GPG signature checks out against AWS's key, itself trusted
# only by the fingerprint AWS documents; and the step is done only when the efa module the
# running kernel loads is the installer's driver, not the kernel's in-tree one (after a kernel
# move DKMS needs the new kernel's headers to build it). Why:
# docs/decisions/047-efa-verified-and-checked-by-its-loaded-module.md.
#
# Inputs:
#   EFA_INSTALLER_VERSION  the installer release, e.g. 1.51.0 (components/hosts/pins.py says what
#                          it carries) (required)
#   EFA_DRIVER_VERSION     the efa kernel driver that release carries, e.g. 3.3.1 (required)
#   EFA_INTERFACES         how many EFA devices the instance must show (the catalog's count)
#                          (required)
#   EFA_INSTALLER_TIMEOUT_SECONDS  bound on the installer run (default 1500, under the step's 30 minutes)
#   (plus the tunables listed in lib/common.sh)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

EFA_INSTALLER_URL=https://efa-installer.amazonaws.com
# AWS's signing key of the installer (EC2 user guide, "Get started with EFA", step 3).
EFA_KEY_FINGERPRINT=4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC
# The installer records what it installed here ("# EFA installer version: 1.43.2").
EFA_RECORD=/opt/amazon/efa_installed_packages
EFA_BIN=/opt/amazon/efa/bin
OFI_NCCL_DIR=/opt/amazon/ofi-nccl
MEMLOCK_DROP_IN=/etc/systemd/system/containerd.service.d/50-efa-memlock.conf

INSTALLED_NOW=false  # this run ran the installer

check_inputs() {
  require_vars EFA_INSTALLER_VERSION EFA_DRIVER_VERSION EFA_INTERFACES
  [[ "${EFA_INSTALLER_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    fatal "EFA_INSTALLER_VERSION must be a release like 1.51.0, got '${EFA_INSTALLER_VERSION}'"
  [[ "${EFA_DRIVER_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    fatal "EFA_DRIVER_VERSION must be a driver version like 3.3.1, got '${EFA_DRIVER_VERSION}'"
  [[ "${EFA_INTERFACES}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "EFA_INTERFACES must be a positive whole number, got '${EFA_INTERFACES}'"
}

installed_efa_version() {
  if [[ -f "${EFA_RECORD}" ]]; then
    sed -n 's/^# EFA installer version: *//p' "${EFA_RECORD}" | head -n 1
  fi
}

ofi_nccl_plugin() {
  if [[ -d "${OFI_NCCL_DIR}" ]]; then
    find "${OFI_NCCL_DIR}" -name 'libnccl-net*.so' -print -quit
  fi
}

# efa_module_version: the version of the efa module the running kernel loads (modprobe takes
# DKMS's build under updates/ before the kernel's own): the installer's driver reports its
# version, with a build suffix (3.3.1g); the in-tree one reports none.
efa_module_version() {
  modinfo -k "$(uname -r)" -F version efa 2>/dev/null || :
}

installers_module() {
  [[ "$(efa_module_version)" == "${EFA_DRIVER_VERSION}"* ]]
}

# download_verified_installer <archive>: the installer archive, run only when its detached
# signature (.sig) checks out against AWS's key, which is trusted only by its fingerprint.
download_verified_installer() {
  local url="${EFA_INSTALLER_URL}/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" key
  key="$(temp_path aws-efa-installer.key)"
  fetch_key "${EFA_INSTALLER_URL}/aws-efa-installer.key" "${EFA_KEY_FINGERPRINT}" "${key}"
  gpg --batch --yes --dearmor -o "${key}.gpg" "${key}"
  download "${url}" "$1"
  download "${url}.sig" "$1.sig"
  gpgv --keyring "${key}.gpg" "$1.sig" "$1" >&2 ||
    fatal "the EFA installer ${EFA_INSTALLER_VERSION} (${url}) does not carry a good signature" \
      "of AWS's key ${EFA_KEY_FINGERPRINT}: not running it"
  log "the EFA installer ${EFA_INSTALLER_VERSION} is signed by AWS's key"
}

install_efa_software() {
  local have archive dir kernel
  have="$(installed_efa_version)"
  if [[ "${have}" == "${EFA_INSTALLER_VERSION}" && -x "${EFA_BIN}/fi_info" &&
    -n "$(ofi_nccl_plugin)" ]] && installers_module; then
    log "EFA installer ${have} already installed, skipping"
    return 0
  fi
  if [[ -n "${have}" && "${have}" != "${EFA_INSTALLER_VERSION}" ]]; then
    log "EFA installer ${have} installed, ${EFA_INSTALLER_VERSION} wanted"
  elif [[ -n "${have}" ]]; then
    log "EFA installer ${have} installed, but the running kernel loads efa" \
      "'$(efa_module_version)', not its driver ${EFA_DRIVER_VERSION}: installing it again"
  fi
  # DKMS builds the efa driver against the running kernel's headers.
  kernel="$(uname -r)"
  apt_install "linux-headers-${kernel}" >/dev/null
  archive="$(temp_path "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz")"
  download_verified_installer "${archive}"
  dir="$(temp_path efa)"
  mkdir -p "${dir}"
  tar -xzf "${archive}" -C "${dir}"
  [[ -x "${dir}/aws-efa-installer/efa_installer.sh" ]] ||
    fatal "the EFA installer archive has no aws-efa-installer/efa_installer.sh"
  # The installer runs apt itself: a dpkg a killed run interrupted is finished first.
  repair_interrupted_dpkg
  log "running the EFA installer ${EFA_INSTALLER_VERSION}"
  (
    cd "${dir}/aws-efa-installer"
    timeout -k 30 "${EFA_INSTALLER_TIMEOUT_SECONDS:-1500}" ./efa_installer.sh -y >&2
  ) || fatal "the EFA installer ${EFA_INSTALLER_VERSION} failed (its output is above)"
  have="$(installed_efa_version)"
  [[ "${have}" == "${EFA_INSTALLER_VERSION}" ]] ||
    fatal "EFA installer ${EFA_INSTALLER_VERSION} wanted, ${EFA_RECORD} reports '${have}'"
  INSTALLED_NOW=true
}

# The module loaded is the one on disk for the running kernel, the installer's: an efa loaded
# before the installer built its driver (the kernel's own, or an older build) is loaded again.
load_efa_driver() {
  installers_module ||
    fatal "the running kernel $(uname -r) loads efa '$(efa_module_version)', not the EFA" \
      "installer's driver ${EFA_DRIVER_VERSION}: DKMS did not build it (dkms status efa;" \
      "linux-headers-$(uname -r) installed?)"
  if module_loaded efa && [[ "${INSTALLED_NOW}" == true ]]; then
    log "efa was loaded before the installer built driver ${EFA_DRIVER_VERSION}: reloading it"
    modprobe -r efa ||
      fatal "efa is in use and cannot be loaded again with driver ${EFA_DRIVER_VERSION}: drain" \
        "and reboot the node, then run pulumi up again"
  fi
  if module_loaded efa; then
    log "efa driver $(efa_module_version) loaded"
    return 0
  fi
  modprobe efa || fatal "the efa kernel driver does not load (modprobe efa); the EFA installer" \
    "builds it for the running kernel: after a kernel update, run this step again"
  log "efa driver $(efa_module_version) loaded"
}

# Containers inherit containerd's limits; EFA pins the memory NCCL sends from, and the default
# locked-memory limit is far too small for that.
allow_locked_memory() {
  local changed
  changed="$(write_file_if_changed "${MEMLOCK_DROP_IN}" <<'UNIT'
[Service]
LimitMEMLOCK=infinity
UNIT
)"
  if [[ "${changed}" == changed ]]; then
    systemctl daemon-reload
  fi
  restart_if_changed containerd "${changed}"
}

verify_efa_devices() {
  local listing found plugin
  listing="$("${EFA_BIN}/fi_info" -p efa -t FI_EP_RDM 2>&1)" ||
    fatal "fi_info -p efa finds no EFA device (${listing##*$'\n'}): was the instance launched" \
      "with its EFA interfaces (nodePools[].efa) in a security group that admits itself?"
  found="$(awk '$1 == "domain:" { print $2 }' <<<"${listing}" | sort -u | wc -l)"
  if ((found != EFA_INTERFACES)); then
    fatal "${EFA_INTERFACES} EFA interface(s) expected, fi_info -p efa lists ${found}: the" \
      "instance lacks EFA interfaces (check its network interfaces in EC2) or the efa driver" \
      "did not bind them (dmesg | grep -i efa)"
  fi
  plugin="$(ofi_nccl_plugin)"
  [[ -n "${plugin}" ]] || fatal "no NCCL network plugin (libnccl-net*.so) under ${OFI_NCCL_DIR}"
  log "${found} EFA interface(s), NCCL plugin ${plugin}"
}

main() {
  init_script efa
  check_inputs
  make_temp_dir
  run_steps install_efa_software load_efa_driver allow_locked_memory verify_efa_devices
}

main "$@"
