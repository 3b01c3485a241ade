#!/usr/bin/env bash
# install-runtime.sh: containerd with the systemd cgroup driver kubelet expects, plus
# (on GPU nodes) the NVIDIA Container Toolkit with nvidia as containerd's default runtime.
#
# Inputs:
#   WITH_NVIDIA_TOOLKIT true (default) or false (a control-plane host: containerd only)
#   NVIDIA_CTK_VERSION  NVIDIA Container Toolkit apt version, e.g. 1.17.8-1
#                       (required unless WITH_NVIDIA_TOOLKIT=false)
#   CONTAINERD_VERSION  containerd apt version from Ubuntu's archive; may end in '*'
#                       (e.g. 1.7.*); empty (default) takes the archive's candidate.
#                       Either way the package is held.
#   (plus the tunables listed in lib/common.sh)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

CONTAINERD_CONFIG=/etc/containerd/config.toml
NVIDIA_KEY_URL=https://nvidia.github.io/libnvidia-container/gpgkey
NVIDIA_KEYRING=/etc/apt/keyrings/nvidia-container-toolkit.gpg
NVIDIA_SOURCES=/etc/apt/sources.list.d/nvidia-container-toolkit.list
CTK_PACKAGES="nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1"

with_toolkit() {
  [[ "${WITH_NVIDIA_TOOLKIT:-true}" == true ]]
}

check_inputs() {
  case "${WITH_NVIDIA_TOOLKIT:-true}" in
    true) ;;
    false) return 0 ;;
    *) fatal "WITH_NVIDIA_TOOLKIT must be true or false, got '${WITH_NVIDIA_TOOLKIT}'" ;;
  esac
  require_vars NVIDIA_CTK_VERSION
  [[ "${NVIDIA_CTK_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.~+]+)?$ ]] ||
    fatal "NVIDIA_CTK_VERSION must be an apt version like 1.17.8-1, got '${NVIDIA_CTK_VERSION}'"
}

install_containerd() {
  local spec=containerd
  if [[ -n "${CONTAINERD_VERSION:-}" ]]; then
    spec="containerd=${CONTAINERD_VERSION}"
  fi
  apt_install "${spec}" >/dev/null
  apt_hold containerd
}

add_nvidia_apt_repo() {
  if ! with_toolkit; then
    log "no NVIDIA Container Toolkit on this host"
    return 0
  fi
  local key changed_key="" changed_list
  if [[ ! -s "${NVIDIA_KEYRING}" ]]; then
    key="$(temp_path nvidia.gpgkey)"
    download "${NVIDIA_KEY_URL}" "${key}"
    gpg --batch --yes --dearmor -o "${key}.gpg" "${key}"
    changed_key="$(install_file_if_changed "${key}.gpg" "${NVIDIA_KEYRING}")"
  fi
  changed_list="$(write_file_if_changed "${NVIDIA_SOURCES}" <<LIST
deb [signed-by=${NVIDIA_KEYRING}] https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /
LIST
)"
  if [[ "${changed_key}${changed_list}" == *changed* ]]; then
    apt_update
  fi
}

install_container_toolkit() {
  with_toolkit || return 0
  local packages=()
  read -r -a packages <<<"${CTK_PACKAGES}"
  apt_install_held "${NVIDIA_CTK_VERSION}" "${packages[@]}"
}

# The wanted config is rebuilt from scratch each run (containerd's full default,
# systemd cgroups, then nvidia-ctk on that copy) and installed only if it differs.
configure_containerd() {
  local staged matches changed
  staged="$(temp_path config.toml)"
  containerd config default >"${staged}"
  matches="$(awk '/^[[:space:]]*SystemdCgroup = (true|false)$/ { n++ } END { print n + 0 }' \
    "${staged}")"
  [[ "${matches}" == 1 ]] ||
    fatal "expected one SystemdCgroup key in 'containerd config default', found ${matches}"
  sed -i -E 's/^([[:space:]]*)SystemdCgroup = false$/\1SystemdCgroup = true/' "${staged}"
  if with_toolkit; then
    nvidia-ctk runtime configure --runtime=containerd --set-as-default \
      --config="${staged}" >/dev/null
  fi
  changed="$(install_file_if_changed "${staged}" "${CONTAINERD_CONFIG}")"
  enable_service containerd
  restart_if_changed containerd "${changed}"
}

verify_runtime() {
  grep -qE '^[[:space:]]*SystemdCgroup = true$' "${CONTAINERD_CONFIG}" ||
    fatal "SystemdCgroup = true expected in ${CONTAINERD_CONFIG}, not found"
  local state
  state="$(systemctl is-active containerd)" ||
    fatal "containerd expected active, systemctl reports '${state}'"
  if ! with_toolkit; then
    log "containerd active"
    return 0
  fi
  local found
  found="$(awk '/default_runtime_name/ { $1 = $1; print }' "${CONTAINERD_CONFIG}")"
  [[ "${found}" == *'default_runtime_name = "nvidia"'* ]] ||
    fatal "default_runtime_name = \"nvidia\" expected in ${CONTAINERD_CONFIG}, found '${found}'"
  grep -qE 'runtimes\.nvidia\]' "${CONTAINERD_CONFIG}" ||
    fatal "an nvidia runtime section expected in ${CONTAINERD_CONFIG}, not found"
  # nvidia-ctk copies runc's options into the nvidia runtime; as the default runtime it
  # must use systemd cgroups too, or kubelet (cgroupDriver: systemd) cannot run pods.
  found="$(awk '/^[[:space:]]*\[/ { inside = ($0 ~ /runtimes\.nvidia\.options\]/) }
    inside && /^[[:space:]]*SystemdCgroup = / { $1 = $1; print }' "${CONTAINERD_CONFIG}")"
  [[ "${found}" == "SystemdCgroup = true" ]] ||
    fatal "SystemdCgroup = true expected in the nvidia runtime options of" \
      "${CONTAINERD_CONFIG}, found '${found:-none}'"
  log "containerd active, nvidia is the default runtime"
}

main() {
  init_script runtime
  check_inputs
  make_temp_dir
  run_steps \
    install_containerd \
    add_nvidia_apt_repo \
    install_container_toolkit \
    configure_containerd \
    verify_runtime
}

main "$@"
