#!/usr/bin/env bash
# Stands in for aws-efa-installer/efa_installer.sh inside the installer archive the curl stub
# serves (tests/test_efa_script.py builds the archive). Like the real one it installs under
# /opt/amazon: the record of what it installed, fi_info (this directory's _fi_info) and the
# NCCL network plugin; the efa module becomes loadable (state efa.installable).
#   state efa-installer.fail   fail this many times (a failed dependency install)
#   state efa-installer.skip-ofi-nccl   install without the NCCL plugin (`--skip-plugin`-like)
#   state efa-installer.dkms-fails      its DKMS build of the efa driver fails (the installer
#                                       finishes all the same, as the real one warns and goes on)
# Its efa driver is a DKMS build for the running kernel, made only when that kernel's headers are
# installed (state modinfo/<kernel>/efa, read by the modinfo stub): version EFA_STUB_DRIVER_VERSION
# (state efa.driver-version when the archive sets none), with the "g" of a GPUDirect build.
# The archive sets EFA_STUB_VERSION in the copy it ships.
# Stands for efa_installer.sh of AWS's EFA installer 1.51.0 (aws-efa-installer-1.51.0.tar.gz),
# as AWS's EC2 user guide ("Get started with EFA", step 3) runs it and as captured installs leave
# the host: /opt/amazon/efa_installed_packages opens with "# EFA installer version: 1.51.0",
# fi_info under /opt/amazon/efa/bin, the NCCL plugin under /opt/amazon/ofi-nccl/lib, the efa
# driver as a DKMS build (dkms.conf of the installer's efa-driver package).
# shellcheck source-path=SCRIPTDIR source=_stub_lib.sh
source "$(dirname "$(command -v _fi_info)")/_stub_lib.sh"
stub_record efa_installer.sh "$@"
: "${EFA_STUB_VERSION:?the archive sets the version it installs}"

if should_fail efa-installer.fail; then
  echo "Error: failed to install the EFA packages (apt-get exited 100)" >&2
  exit 1
fi
mkdir -p /opt/amazon/efa/bin /opt/amazon/ofi-nccl/lib/x86_64-linux-gnu
cp "$(command -v _fi_info)" /opt/amazon/efa/bin/fi_info
if ! state_has efa-installer.skip-ofi-nccl; then
  : >/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so
fi
printf '# EFA installer version: %s\n# Debug packages installed: no\n' "${EFA_STUB_VERSION}" \
  >/opt/amazon/efa_installed_packages
state_set efa.installable 1
kernel="$(state_get uname.r 6.8.0-1021-aws)"
if [[ -n "$(installed_version "linux-headers-${kernel}")" ]] && ! state_has efa-installer.dkms-fails; then
  state_set "modinfo/${kernel}/efa" "${EFA_STUB_DRIVER_VERSION:-$(state_get efa.driver-version 0.0.0)}g"
else
  echo "DKMS: efa: no kernel headers for ${kernel}: not built" >&2
fi
echo "===================================================="
echo "EFA installation complete."
