#!/usr/bin/env bash
# install-efa.sh: the EFA software on a node launched with EFA interfaces: AWS's EFA installer
# (EFA kernel driver, rdma-core, libfabric with the efa provider, and the NCCL network plugin
# aws-ofi-nccl, which the installer ships as libnccl-ofi), then proof that libfabric sees every
# EFA interface the instance type has (`fi_info -p efa`), and unlimited locked memory for the
# containers (EFA registers the buffers NCCL sends from).
#
# Inputs:
#   EFA_INSTALLER_VERSION  the installer release, e.g. 1.43.2 (components/hosts/pins.py says what
#                          it carries) (required)
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
# The installer records what it installed here ("# EFA installer version: 1.43.2").
EFA_RECORD=/opt/amazon/efa_installed_packages
EFA_BIN=/opt/amazon/efa/bin
OFI_NCCL_DIR=/opt/amazon/ofi-nccl
MEMLOCK_DROP_IN=/etc/systemd/system/containerd.service.d/50-efa-memlock.conf

check_inputs() {
  require_vars EFA_INSTALLER_VERSION EFA_INTERFACES
  [[ "${EFA_INSTALLER_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    fatal "EFA_INSTALLER_VERSION must be a release like 1.43.2, got '${EFA_INSTALLER_VERSION}'"
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

install_efa_software() {
  local have archive dir
  have="$(installed_efa_version)"
  if [[ "${have}" == "${EFA_INSTALLER_VERSION}" && -x "${EFA_BIN}/fi_info" &&
    -n "$(ofi_nccl_plugin)" ]]; then
    log "EFA installer ${have} already installed, skipping"
    return 0
  fi
  if [[ -n "${have}" ]]; then
    log "EFA installer ${have} installed, ${EFA_INSTALLER_VERSION} wanted"
  fi
  archive="$(temp_path "aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz")"
  download "${EFA_INSTALLER_URL}/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" "${archive}"
  dir="$(temp_path efa)"
  mkdir -p "${dir}"
  tar -xzf "${archive}" -C "${dir}"
  [[ -x "${dir}/aws-efa-installer/efa_installer.sh" ]] ||
    fatal "the EFA installer archive has no aws-efa-installer/efa_installer.sh"
  log "running the EFA installer ${EFA_INSTALLER_VERSION}"
  (
    cd "${dir}/aws-efa-installer"
    timeout -k 30 "${EFA_INSTALLER_TIMEOUT_SECONDS:-1500}" ./efa_installer.sh -y >&2
  ) || fatal "the EFA installer ${EFA_INSTALLER_VERSION} failed (its output is above)"
  have="$(installed_efa_version)"
  [[ "${have}" == "${EFA_INSTALLER_VERSION}" ]] ||
    fatal "EFA installer ${EFA_INSTALLER_VERSION} wanted, ${EFA_RECORD} reports '${have}'"
}

load_efa_driver() {
  if lsmod | awk '{ print $1 }' | grep -qxF efa; then
    log "efa driver loaded"
    return 0
  fi
  modprobe efa || fatal "the efa kernel driver does not load (modprobe efa); the EFA installer" \
    "builds it for the running kernel: after a kernel update, run this step again"
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
