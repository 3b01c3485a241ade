#!/usr/bin/env bash
# install-runtime.sh: containerd with the systemd cgroup driver kubelet expects and kubeadm's
# sandbox image, plus (on GPU nodes) the NVIDIA Container Toolkit with nvidia as containerd's
# default runtime and GPUs handed only to containers that requested them.
#
# Inputs:
#   CONTAINERD_VERSION  the exact containerd.io version of Docker's apt repository for this
#                       release, e.g. 2.2.1-1~ubuntu.24.04~noble; held (required)
#   CONTAINERD_REPOSITORY  that repository's apt source for this release, e.g.
#                       "https://download.docker.com/linux/ubuntu noble stable" (required)
#   SANDBOX_IMAGE       the pause image kubeadm expects, e.g. registry.k8s.io/pause:3.10.1
#                       (required)
#   WITH_NVIDIA_TOOLKIT true (default) or false (a control-plane host: containerd only)
#   NVIDIA_CTK_VERSION  NVIDIA Container Toolkit apt version, e.g. 1.20.0-1
#                       (required unless WITH_NVIDIA_TOOLKIT=false)
#   (plus the tunables listed in lib/common.sh)
#
# containerd's config is written whole (never edited from `containerd config default`, whose
# text differs between releases: 1.7 prints go-toml v1's "double quotes", 2.x go-toml v2's
# 'single quotes' and another schema; containerd.io's packaged one disables CRI), and checked the
# way containerd reads it: `containerd config dump`, with the toolkit's drop-in merged in, read
# with a TOML parser (docs/decisions/052-hosts-read-what-the-tools-write.md).
#
# containerd.io comes from Docker's repository, which keeps every version it published, so the
# pin still installs when a newer one appears; Ubuntu's archive keeps only the newest of each
# pocket (docs/decisions/042-containerd-from-a-repository-that-keeps-every-version.md).
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

CONTAINERD_CONFIG=/etc/containerd/config.toml
CONTAINERD_DROP_INS=/etc/containerd/conf.d
NVIDIA_DROP_IN="${CONTAINERD_DROP_INS}/99-nvidia.toml"
TOOLKIT_CONFIG=/etc/nvidia-container-runtime/config.toml
CRICTL_CONFIG=/etc/crictl.yaml
CONTAINERD_SOCKET=unix:///run/containerd/containerd.sock
# The repositories' keys (DOCKER_KEY_*, NVIDIA_KEY_*) are pinned in lib/common.sh.
CTK_PACKAGES="nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1"
# containerd 2.x config (version 3): the CRI plugin is split into these two.
CRI_RUNTIME='plugins."io.containerd.cri.v1.runtime"'
CRI_IMAGES='plugins."io.containerd.cri.v1.images"'
# GPU isolation (nvidia-container-toolkit internal/config/image/cuda_image.go, VisibleDevices):
# an unprivileged container gets devices from NVIDIA_VISIBLE_DEVICES only when
# accept-nvidia-visible-devices-envvar-when-unprivileged is true (the default), and from the
# device plugin's volume mounts when accept-nvidia-visible-devices-as-volume-mounts is true.
# Every CUDA image sets NVIDIA_VISIBLE_DEVICES=all, so the first must be off.
TOOLKIT_SETTINGS=(
  accept-nvidia-visible-devices-envvar-when-unprivileged=false
  accept-nvidia-visible-devices-as-volume-mounts=true
)

with_toolkit() {
  [[ "${WITH_NVIDIA_TOOLKIT:-true}" == true ]]
}

check_inputs() {
  case "${WITH_NVIDIA_TOOLKIT:-true}" in
    true)
      require_vars NVIDIA_CTK_VERSION CONTAINERD_VERSION CONTAINERD_REPOSITORY SANDBOX_IMAGE
      ;;
    false) require_vars CONTAINERD_VERSION CONTAINERD_REPOSITORY SANDBOX_IMAGE ;;
    *) fatal "WITH_NVIDIA_TOOLKIT must be true or false, got '${WITH_NVIDIA_TOOLKIT}'" ;;
  esac
  [[ "${CONTAINERD_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+-[0-9]+~ubuntu\.[0-9]+\.[0-9]+~[a-z]+$ ]] ||
    fatal "CONTAINERD_VERSION must be one containerd.io version like 2.2.1-1~ubuntu.24.04~noble," \
      "got '${CONTAINERD_VERSION}'"
  [[ "${CONTAINERD_REPOSITORY}" =~ ^https://download\.docker\.com/linux/ubuntu\ [a-z]+\ stable$ ]] ||
    fatal "CONTAINERD_REPOSITORY must be Docker's apt source like" \
      "'https://download.docker.com/linux/ubuntu noble stable', got '${CONTAINERD_REPOSITORY}'"
  [[ "${SANDBOX_IMAGE}" =~ ^[a-z0-9.:/_-]+:[A-Za-z0-9._-]+$ ]] ||
    fatal "SANDBOX_IMAGE must be an image with a tag like registry.k8s.io/pause:3.10.1," \
      "got '${SANDBOX_IMAGE}'"
  with_toolkit || return 0
  [[ "${NVIDIA_CTK_VERSION}" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.~+]+)?$ ]] ||
    fatal "NVIDIA_CTK_VERSION must be an apt version like 1.20.0-1, got '${NVIDIA_CTK_VERSION}'"
}

# containerd.io conflicts with (and replaces) Ubuntu's containerd and runc: a host that had them
# moves over in the same transaction.
install_containerd() {
  add_signed_apt_repo docker "${DOCKER_KEY_URL}" "${DOCKER_KEY_FINGERPRINT}" \
    "${CONTAINERD_REPOSITORY}"
  require_apt_version containerd.io "${CONTAINERD_VERSION}" "Docker's repository"
  apt_install "containerd.io=${CONTAINERD_VERSION}" >/dev/null
  apt_hold containerd.io
  local found
  found="$(containerd --version)"
  [[ "${found}" =~ \ v?2\.[0-9]+\.[0-9]+ ]] ||
    fatal "containerd 2.x expected (containerd.io=${CONTAINERD_VERSION}), found '${found}'"
}

add_nvidia_apt_repo() {
  if ! with_toolkit; then
    log "no NVIDIA Container Toolkit on this host"
    return 0
  fi
  add_signed_apt_repo nvidia-container-toolkit "${NVIDIA_KEY_URL}" "${NVIDIA_KEY_FINGERPRINT}" \
    "https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /"
}

install_container_toolkit() {
  with_toolkit || return 0
  local packages=()
  read -r -a packages <<<"${CTK_PACKAGES}"
  apt_install_held "${NVIDIA_CTK_VERSION}" "${packages[@]}"
}

containerd_config() {
  cat <<TOML
# Written by gpu-cluster (install-runtime.sh): the whole containerd 2.x config; the NVIDIA
# Container Toolkit adds its runtime in ${CONTAINERD_DROP_INS}/.
version = 3
imports = ["${CONTAINERD_DROP_INS}/*.toml"]

[${CRI_IMAGES}.pinned_images]
  sandbox = "${SANDBOX_IMAGE}"

[${CRI_RUNTIME}.containerd]
  default_runtime_name = "runc"

[${CRI_RUNTIME}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[${CRI_RUNTIME}.containerd.runtimes.runc.options]
  SystemdCgroup = true
TOML
}

# What containerd was last restarted with, as a digest of what it reads (`containerd config
# dump`, parsed, so a file nvidia-ctk rewrote in another spelling is the same config).
CONTAINERD_RUNNING_RECORD=/var/lib/gpu-cluster/containerd-effective-config.sha256

# effective_config <name>: the sha256 of `containerd config dump` as parsed TOML (sorted JSON);
# fails, after containerd's message, when containerd cannot read its config.
effective_config() {
  local dump
  dump="$(temp_path "config-dump.$1.toml")"
  containerd config dump >"${dump}" || return 1
  toml_read canonical "${dump}" | sha256sum | awk '{ print $1 }'
}

# The config is written whole each run and installed only when it differs; nvidia-ctk (1.18+)
# writes the nvidia runtime, copied from runc's options (so systemd cgroups too) and set as the
# default, to its drop-in, and rewrites config.toml in its own spelling on every run (1.20.0,
# config_drop_in.go `ConfigWithDropIn.Save`). So no file's bytes say whether containerd must
# restart; what it reads does. It restarts when what it reads after this run's edits differs
# from what it read before them (a config edited by hand and put back: containerd may run the
# edit) or from the record of its last restart by this step, or of what it read before the
# first run's edits (a run killed between its edits and the restart left the new config on
# disk, containerd on the old one), and only then.
configure_containerd() {
  local before now recorded=""
  if ! before="$(effective_config before)"; then
    log "containerd cannot read ${CONTAINERD_CONFIG} as found (above): writing it whole"
    before=unreadable
  fi
  if [[ -s "${CONTAINERD_RUNNING_RECORD}" ]]; then
    recorded="$(cat "${CONTAINERD_RUNNING_RECORD}")"
  else
    # No record yet (the first run): containerd runs what it reads now. Recorded before the
    # first edit, so a run killed between the edits and the restart leaves a record that
    # differs from the edited config, and the next run restarts.
    recorded="${before}"
    printf '%s\n' "${recorded}" | write_file_if_changed "${CONTAINERD_RUNNING_RECORD}" >/dev/null
  fi
  containerd_config | write_file_if_changed "${CONTAINERD_CONFIG}" >/dev/null
  if with_toolkit; then
    nvidia-ctk runtime configure --runtime=containerd --set-as-default \
      --config="${CONTAINERD_CONFIG}" --drop-in-config="${NVIDIA_DROP_IN}" >/dev/null
  fi
  now="$(effective_config after)" ||
    fatal "containerd config dump failed: containerd cannot read ${CONTAINERD_CONFIG}"
  enable_service containerd
  if [[ "${now}" != "${before}" ]]; then
    log "containerd's configuration changed (\`containerd config dump\`): restarting containerd"
    systemctl restart containerd
  elif [[ -n "${recorded}" && "${now}" != "${recorded}" ]]; then
    log "containerd was not restarted after its configuration last changed: restarting containerd"
    systemctl restart containerd
  else
    log "containerd: configuration unchanged (\`containerd config dump\`), not restarting"
  fi
  printf '%s\n' "${now}" | write_file_if_changed "${CONTAINERD_RUNNING_RECORD}" >/dev/null
  configure_crictl
}

# crictl (cri-tools, which install-kube-tools.sh installs) asks the runtime at these
# endpoints; without a config it probes a list of deprecated defaults and warns on every call
# (cri-tools docs/crictl.md, "Configuration": runtime-endpoint, image-endpoint, timeout).
configure_crictl() {
  write_file_if_changed "${CRICTL_CONFIG}" >/dev/null <<YAML
# Written by gpu-cluster (install-runtime.sh): crictl talks to containerd.
runtime-endpoint: ${CONTAINERD_SOCKET}
image-endpoint: ${CONTAINERD_SOCKET}
timeout: 10
YAML
}

configure_toolkit() {
  with_toolkit || return 0
  local before setting args=()
  for setting in "${TOOLKIT_SETTINGS[@]}"; do
    args+=(--set "${setting}")
  done
  before="$(file_hash "${TOOLKIT_CONFIG}")"
  nvidia-ctk config --config-file="${TOOLKIT_CONFIG}" --in-place "${args[@]}" >/dev/null
  if [[ "$(file_hash "${TOOLKIT_CONFIG}")" != "${before}" ]]; then
    log "${TOOLKIT_CONFIG}: ${TOOLKIT_SETTINGS[*]}"
  else
    log "${TOOLKIT_CONFIG}: no change"
  fi
}

# expect <what> <found> <wanted>: fail naming both unless they are equal (values as JSON).
expect() {
  [[ "$2" == "$3" ]] || fatal "$1: ${3} expected in \`containerd config dump\`, found '${2:-nothing}'"
}

# cri_runtime <dump> <key>...: a value of the CRI runtime plugin's section of a dump.
cri_runtime() {
  toml_read get "$1" plugins io.containerd.cri.v1.runtime "${@:2}"
}

verify_runtime() {
  local dump state
  dump="$(temp_path config-dump.toml)"
  containerd config dump >"${dump}" ||
    fatal "containerd config dump failed: containerd cannot read ${CONTAINERD_CONFIG}"
  expect "runc SystemdCgroup" \
    "$(cri_runtime "${dump}" containerd runtimes runc options SystemdCgroup)" true
  expect "sandbox image" \
    "$(toml_read get "${dump}" plugins io.containerd.cri.v1.images pinned_images sandbox)" \
    "\"${SANDBOX_IMAGE}\""
  state="$(systemctl is-active containerd)" ||
    fatal "containerd expected active, systemctl reports '${state}'"
  if ! with_toolkit; then
    log "containerd active, systemd cgroups, sandbox ${SANDBOX_IMAGE}"
    return 0
  fi
  expect "default runtime" "$(cri_runtime "${dump}" containerd default_runtime_name)" '"nvidia"'
  # As the default runtime the nvidia one must use systemd cgroups too, or kubelet
  # (cgroupDriver: systemd) cannot run pods.
  expect "nvidia runtime SystemdCgroup" \
    "$(cri_runtime "${dump}" containerd runtimes nvidia options SystemdCgroup)" true
  local setting key found
  for setting in "${TOOLKIT_SETTINGS[@]}"; do
    key="${setting%%=*}"
    found="$(toml_read get "${TOOLKIT_CONFIG}" "${key}")"
    [[ "${found}" == "${setting#*=}" ]] ||
      fatal "nvidia-ctk config did not set ${key} = ${setting#*=} in ${TOOLKIT_CONFIG}" \
        "(found '${found:-nothing}'): without it containers see GPUs they did not request;" \
        "look at 'nvidia-ctk --version' and that file on this host"
  done
  log "containerd active, nvidia is the default runtime, GPUs only on request"
}

main() {
  init_script runtime
  check_inputs
  make_temp_dir
  run_steps \
    install_containerd \
    add_nvidia_apt_repo \
    install_container_toolkit \
    ensure_toml_parser \
    configure_containerd \
    configure_toolkit \
    verify_runtime
}

main "$@"
