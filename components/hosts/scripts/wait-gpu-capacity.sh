#!/usr/bin/env bash
# wait-gpu-capacity.sh: runs on the control plane; waits until a GPU node advertises all of its
# GPUs to the scheduler (allocatable nvidia.com/gpu == EXPECTED_GPUS), bounded.
#
# Inputs:
#   NODE_NAME                the Kubernetes Node (required)
#   EXPECTED_GPUS            catalog GPU count x time-slicing replicas (required, > 0)
#   TIMEOUT_SECONDS          how long to wait (required; 0 = look once)
#   POLL_SECONDS             pause between looks (default 10)
#   DEVICE_PLUGIN_NAMESPACE  where the device plugin runs, for the hint (default nvidia-device-plugin)
#   DEVICE_PLUGIN_NAME       its DaemonSet, for the hint (default nvidia-device-plugin)
#   KUBECONFIG_PATH          admin kubeconfig (default /etc/kubernetes/admin.conf)
#   CHANGE                   digest of the node's disruptive steps: a new one (a driver, runtime
#                            or kubelet change) re-runs this check (optional, not used otherwise)
#
# On timeout the message names what was last seen: the node not Ready (kubelet), Ready without
# GPUs (device plugin or nvidia container runtime), or with fewer GPUs than expected.
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

GPU_RESOURCE="nvidia.com/gpu"
# One look: the Ready condition and the allocatable GPUs, tab-separated (either may be empty).
NODE_FIELDS='{.status.conditions[?(@.type=="Ready")].status}{"\t"}{.status.allocatable.nvidia\.com/gpu}'

# Set by observe_node: what the last look saw.
NODE_STATE=""  # not-found | not-ready | no-gpus | too-few | too-many | ok | api-error
NODE_READY=""
NODE_GPUS=""
NODE_ERROR=""

check_inputs() {
  require_vars NODE_NAME EXPECTED_GPUS TIMEOUT_SECONDS
  require_node_name
  local name
  for name in EXPECTED_GPUS TIMEOUT_SECONDS POLL_SECONDS; do
    [[ "${!name}" =~ ^[0-9]+$ ]] || fatal "${name} must be a whole number of $(unit_of "${name}"), got '${!name}'"
  done
  ((EXPECTED_GPUS > 0)) || fatal "EXPECTED_GPUS must be at least 1, got ${EXPECTED_GPUS}"
  [[ -r "${KUBECONFIG_PATH}" ]] ||
    fatal "cannot read ${KUBECONFIG_PATH}: this step runs on a control-plane node (kubeadm admin kubeconfig)"
}

unit_of() {
  if [[ "$1" == EXPECTED_GPUS ]]; then echo GPUs; else echo seconds; fi
}

# observe_node: one bounded look at the Node; sets NODE_STATE and friends.
observe_node() {
  local out err rc=0
  err="$(temp_path kubectl.err)"
  out="$(kubectl --kubeconfig "${KUBECONFIG_PATH}" --request-timeout=20s \
    get node "${NODE_NAME}" -o "jsonpath=${NODE_FIELDS}" 2>"${err}")" || rc=$?
  NODE_READY=""
  NODE_GPUS=""
  NODE_ERROR=""
  if ((rc != 0)); then
    if grep -q NotFound "${err}"; then
      NODE_STATE=not-found
    else
      NODE_STATE=api-error
      NODE_ERROR="$(head -c 300 "${err}")"
    fi
    return 0
  fi
  # Split on the tab by hand: `read` would collapse an empty first field into the second.
  NODE_READY="${out%%$'\t'*}"
  NODE_GPUS="${out#*$'\t'}"
  [[ "${out}" == *$'\t'* ]] || NODE_GPUS=""
  if [[ "${NODE_READY}" != True ]]; then
    NODE_STATE=not-ready
  elif [[ -z "${NODE_GPUS}" || "${NODE_GPUS}" == 0 ]]; then
    NODE_STATE=no-gpus
  elif ! [[ "${NODE_GPUS}" =~ ^[0-9]+$ ]]; then
    NODE_STATE=api-error
    NODE_ERROR="allocatable ${GPU_RESOURCE} is '${NODE_GPUS}', not a count"
  elif ((NODE_GPUS < EXPECTED_GPUS)); then
    NODE_STATE=too-few
  elif ((NODE_GPUS > EXPECTED_GPUS)); then
    NODE_STATE=too-many
  else
    NODE_STATE=ok
  fi
}

describe_state() {
  local ns="${DEVICE_PLUGIN_NAMESPACE}" plugin_pods
  plugin_pods="kubectl -n ${ns} get pods -o wide --field-selector spec.nodeName=${NODE_NAME}"
  case "${NODE_STATE}" in
    not-found)
      echo "node ${NODE_NAME} is not Ready: check kubelet on the node (journalctl -u kubelet); the API server has no Node of that name"
      ;;
    not-ready)
      echo "node ${NODE_NAME} is not Ready: check kubelet on the node (journalctl -u kubelet); its Ready condition is ${NODE_READY:-missing}"
      ;;
    no-gpus)
      echo "node ${NODE_NAME} is Ready but has no allocatable ${GPU_RESOURCE}: the device plugin pod on it or the nvidia container runtime is not working (${plugin_pods}; kubectl -n ${ns} logs <that pod>, or kubectl -n ${ns} logs ds/${DEVICE_PLUGIN_NAME}; on the node: containerd config dump, /etc/containerd/conf.d/99-nvidia.toml; after a reboot, a kernel without an NVIDIA module: systemctl status gpu-cluster-nvidia-boot-check)"
      ;;
    too-few | too-many)
      echo "node ${NODE_NAME} reports ${NODE_GPUS} allocatable ${GPU_RESOURCE}, expected ${EXPECTED_GPUS}: check nvidia-smi on the node, MIG/time-slicing config (kubectl -n ${ns} get configmap, ${plugin_pods})"
      ;;
    api-error)
      echo "cannot read node ${NODE_NAME} from the API server: ${NODE_ERROR:-unknown error}"
      ;;
    *)
      echo "node ${NODE_NAME}: ${NODE_GPUS} allocatable ${GPU_RESOURCE}, as expected"
      ;;
  esac
}

wait_for_gpu_capacity() {
  local deadline last="" now
  deadline=$((SECONDS + TIMEOUT_SECONDS))
  while true; do
    observe_node
    if [[ "${NODE_STATE}" == ok ]]; then
      return 0
    fi
    now="${NODE_STATE}/${NODE_READY}/${NODE_GPUS}"
    if [[ "${now}" != "${last}" ]]; then
      log "waiting: $(describe_state) ($((deadline - SECONDS))s left)"
      last="${now}"
    fi
    if ((SECONDS >= deadline)); then
      fatal "after ${TIMEOUT_SECONDS}s: $(describe_state)"
    fi
    sleep "${POLL_SECONDS}"
  done
}

main() {
  init_script gpu-capacity
  make_temp_dir
  [[ -z "${CHANGE:-}" ]] || log "after host change ${CHANGE}"
  POLL_SECONDS="${POLL_SECONDS:-10}"
  DEVICE_PLUGIN_NAMESPACE="${DEVICE_PLUGIN_NAMESPACE:-nvidia-device-plugin}"
  DEVICE_PLUGIN_NAME="${DEVICE_PLUGIN_NAME:-nvidia-device-plugin}"
  KUBECONFIG_PATH="${KUBECONFIG_PATH:-/etc/kubernetes/admin.conf}"
  run_steps \
    check_inputs \
    wait_for_gpu_capacity
  describe_state
}

main "$@"
