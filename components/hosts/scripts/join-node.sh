#!/usr/bin/env bash
# join-node.sh: kubeadm join this host as a worker node, from a JoinConfiguration file.
#
# Inputs:
#   NODE_NAME         Kubernetes node name (required)
#   API_ENDPOINT      API server host:port, e.g. 10.0.1.10:6443 (required)
#   JOIN_TOKEN        bootstrap token abcdef.0123456789abcdef (required, secret: never printed)
#   CA_CERT_HASH      sha256:<64 hex> of the cluster CA public key (required)
#   KUBERNETES_MINOR  e.g. 1.35; the installed kubeadm must match (required)
#   NODE_LABELS       comma-separated key=value labels (optional)
#   NODE_TAINTS       comma-separated key=value:Effect or key:Effect taints (optional)
#   PROVIDER_ID       the kubelet's --provider-id (optional): aws:///<zone>/<instance id> for an
#                     EC2 machine, gpu-cluster:///host-<hex> for an existing host; the Node's
#                     spec.providerID, which a drain on delete checks it acts on
#   EXPECTED_GPUS     allocatable nvidia.com/gpu the Node must reach (optional: no capacity check
#                     when empty, validation.enabled false)
#   READY_TIMEOUT_SECONDS     how long to wait for the Node to register and be Ready (default 600)
#   CAPACITY_TIMEOUT_SECONDS  how long to wait for its GPUs to be allocatable (default 900)
#   DEVICE_PLUGIN_NAMESPACE   where the device plugin runs, for the hint (default nvidia-device-plugin)
#   CHANGE            digest of the node's disruptive steps: a new one re-runs the checks after a
#                     roll changed the host (optional, logged only)
#   JOIN_TIMEOUT_SECONDS  bound on kubeadm join (default 1020: above the sum of the phase
#                         timeouts the JoinConfiguration sets, so kubeadm reports which phase
#                         timed out before this bound cuts it off)
#
# The JoinConfiguration holds the token: it is written 0600 in a private temporary
# directory and removed when the script exits, whether the join worked or not. After the join
# the Node is watched through the API with the node's own kubelet credentials (the Node
# authorizer lets a node read its own Node object): registered, Ready, and with every GPU
# allocatable, each failure named apart.
set -Eeuo pipefail
set +x # the token must not reach a trace

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

KUBELET_KUBECONFIG=/etc/kubernetes/kubelet.conf
# kubeadm's own join timeouts, written out (kubeadm.k8s.io/v1beta4 JoinConfiguration.timeouts;
# these are its defaults: discovery 5m, tlsBootstrap 5m, kubeletHealthCheck 4m,
# kubernetesAPICall 1m). A worker join waits on them one after another: at most 15m.
JOIN_PHASE_TIMEOUTS_SECONDS=$((300 + 300 + 240 + 60))
DEFAULT_JOIN_TIMEOUT_SECONDS=$((JOIN_PHASE_TIMEOUTS_SECONDS + 120))
LABEL_RE='^([A-Za-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?=([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$'
TAINT_RE='^([A-Za-z0-9.-]+/)?[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(=[A-Za-z0-9._-]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$'

# Inputs are checked before anything is touched; messages never include the token.
check_inputs() {
  require_vars NODE_NAME API_ENDPOINT JOIN_TOKEN CA_CERT_HASH KUBERNETES_MINOR
  local item items=()
  [[ "${NODE_NAME}" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] ||
    fatal "NODE_NAME must be a lowercase DNS name, got '${NODE_NAME}'"
  [[ "${API_ENDPOINT}" =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] ||
    fatal "API_ENDPOINT must be host:port, got '${API_ENDPOINT}'"
  [[ "${JOIN_TOKEN}" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] ||
    fatal "JOIN_TOKEN is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}); value not shown"
  [[ "${CA_CERT_HASH}" =~ ^sha256:[a-f0-9]{64}$ ]] ||
    fatal "CA_CERT_HASH must be sha256:<64 hex digits>, got '${CA_CERT_HASH}'"
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
  [[ -z "${PROVIDER_ID:-}" || "${PROVIDER_ID}" =~ ^aws:///[a-z0-9-]+/i-[0-9a-f]+$ ||
    "${PROVIDER_ID}" =~ ^gpu-cluster:///host-[0-9a-f]+$ ]] ||
    fatal "PROVIDER_ID must be aws:///<zone>/<instance id> or gpu-cluster:///host-<hex>," \
      "got '${PROVIDER_ID}'"
  local name
  for name in EXPECTED_GPUS READY_TIMEOUT_SECONDS CAPACITY_TIMEOUT_SECONDS; do
    [[ -z "${!name:-}" || "${!name}" =~ ^[0-9]+$ ]] ||
      fatal "${name} must be a whole number, got '${!name}'"
  done
  # No Node ever reports 0 as "every GPU": an empty EXPECTED_GPUS is the way to skip the check.
  [[ -z "${EXPECTED_GPUS:-}" ]] || ((10#${EXPECTED_GPUS} >= 1)) ||
    fatal "EXPECTED_GPUS must be at least 1, got '${EXPECTED_GPUS}' (empty: no capacity check)"
  IFS=, read -r -a items <<<"${NODE_LABELS:-}"
  for item in "${items[@]}"; do
    [[ "${item}" =~ ${LABEL_RE} ]] || fatal "NODE_LABELS: '${item}' is not key=value"
  done
  IFS=, read -r -a items <<<"${NODE_TAINTS:-}"
  for item in "${items[@]}"; do
    [[ "${item}" =~ ${TAINT_RE} ]] ||
      fatal "NODE_TAINTS: '${item}' is not key=value:Effect (NoSchedule, PreferNoSchedule, NoExecute)"
  done
}


check_kubeadm_version() {
  local found
  found="$(kubeadm version -o short)"
  [[ "${found}" == "v${KUBERNETES_MINOR}."* ]] ||
    fatal "kubeadm v${KUBERNETES_MINOR}.x expected, found ${found}; run install-kube-tools.sh"
}

kubelet_args_yaml() {
  if [[ -z "${NODE_LABELS:-}" && -z "${PROVIDER_ID:-}" ]]; then
    printf '  kubeletExtraArgs: []\n'
    return 0
  fi
  printf '  kubeletExtraArgs:\n'
  [[ -z "${NODE_LABELS:-}" ]] ||
    printf '    - name: node-labels\n      value: "%s"\n' "${NODE_LABELS}"
  [[ -z "${PROVIDER_ID:-}" ]] ||
    printf '    - name: provider-id\n      value: "%s"\n' "${PROVIDER_ID}"
}

taints_yaml() {
  local item key value effect items=()
  IFS=, read -r -a items <<<"${NODE_TAINTS:-}"
  if ((${#items[@]} == 0)); then
    printf '  taints: []\n'
    return 0
  fi
  printf '  taints:\n'
  for item in "${items[@]}"; do
    effect="${item##*:}"
    key="${item%:*}"
    value=""
    if [[ "${key}" == *=* ]]; then
      value="${key#*=}"
      key="${key%%=*}"
    fi
    printf '    - key: "%s"\n      value: "%s"\n      effect: %s\n' "${key}" "${value}" "${effect}"
  done
}

# write_join_config <file>: kubeadm.k8s.io/v1beta4 JoinConfiguration, mode 0600.
write_join_config() {
  (
    umask 077
    cat >"$1" <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "${API_ENDPOINT}"
    token: "${JOIN_TOKEN}"
    caCertHashes:
      - "${CA_CERT_HASH}"
nodeRegistration:
  name: "${NODE_NAME}"
  criSocket: unix:///run/containerd/containerd.sock
$(kubelet_args_yaml)
$(taints_yaml)
timeouts:
  discovery: 5m0s
  tlsBootstrap: 5m0s
  kubeletHealthCheck: 4m0s
  kubernetesAPICall: 1m0s
YAML
  )
  chmod 0600 "$1"
}

# kubeconfig_field <key>: the first value of `key:` in the kubelet's kubeconfig ("" if none).
kubeconfig_field() {
  awk -v k="$1:" '$1 == k { print $2; exit }' "${KUBELET_KUBECONFIG}"
}

# The joined cluster's CA public key hash, from the kubelet's kubeconfig ("" if not embedded).
joined_ca_hash() {
  local data hex
  data="$(kubeconfig_field certificate-authority-data)"
  [[ -n "${data}" ]] || return 0
  hex="$(printf '%s' "${data}" | base64 -d | openssl x509 -noout -pubkey |
    openssl pkey -pubin -outform der | sha256sum | awk '{ print $1 }')"
  printf 'sha256:%s\n' "${hex}"
}

# A host joined to another cluster (a new control plane: new endpoint or CA) leaves it first.
# This is the only time a kept host needs `kubeadm reset`; nothing dials a node on delete, so
# a terminated or unreachable node never blocks an update or a destroy.
leave_other_cluster() {
  if [[ ! -f "${KUBELET_KUBECONFIG}" ]]; then
    log "not joined to any cluster yet"
    return 0
  fi
  local server hash
  server="$(kubeconfig_field server)"
  hash="$(joined_ca_hash)"
  if [[ (-z "${server}" || "${server}" == "https://${API_ENDPOINT}") &&
    (-z "${hash}" || "${hash}" == "${CA_CERT_HASH}") ]]; then
    log "joined to ${API_ENDPOINT} already"
    return 0
  fi
  log "joined to another cluster (${server:-unknown server}, CA ${hash:-unknown}): kubeadm reset"
  timeout -k 30 300 kubeadm reset -f >&2
  local entries=()
  if [[ -d /etc/cni/net.d ]]; then
    mapfile -t entries < <(find /etc/cni/net.d -mindepth 1 -maxdepth 1)
  fi
  if ((${#entries[@]} > 0)); then
    rm -rf -- "${entries[@]}"
  fi
}

join_cluster() {
  if [[ -f "${KUBELET_KUBECONFIG}" ]]; then
    if ! systemctl is-active --quiet kubelet; then
      # Joined before, kubelet stopped since: kubeadm join would refuse the existing file.
      log "already joined but kubelet is not running, starting it"
      systemctl start kubelet
      return 0
    fi
    ALREADY_JOINED=true
    log "already joined (${KUBELET_KUBECONFIG} exists, kubelet active), skipping"
    return 0
  fi
  check_kubeadm_version
  local config
  config="$(temp_path join-config.yaml)"
  write_join_config "${config}"
  log "kubeadm join ${API_ENDPOINT} as ${NODE_NAME}"
  local status=0
  timeout -k 30 "${JOIN_TIMEOUT_SECONDS:-${DEFAULT_JOIN_TIMEOUT_SECONDS}}" kubeadm join --config "${config}" >&2 || status=$?
  rm -f -- "${config}"
  if ((status != 0)); then
    # Leave a clean host so the next `pulumi up` can join again (kubeadm's preflight refuses
    # the files a half-done join leaves behind).
    kubeadm reset -f >&2 || log "kubeadm reset after the failed join also failed"
    fatal "kubeadm join ${API_ENDPOINT} failed (exit ${status}): check that ${API_ENDPOINT} is" \
      "reachable from the node and the API server is healthy, then run pulumi up again (the" \
      "node's bootstrap token is valid for 2 hours after it was minted; later," \
      "pulumi up --replace the URN of ${NODE_NAME}-join-token for a new one)"
  fi
}

verify_joined() {
  [[ -f "${KUBELET_KUBECONFIG}" ]] ||
    fatal "${KUBELET_KUBECONFIG} expected after kubeadm join, not found"
  local state
  state="$(systemctl is-active kubelet)" ||
    fatal "kubelet expected active after kubeadm join, systemctl reports '${state}'"
  log "${NODE_NAME} joined ${API_ENDPOINT}"
}

# ---- the Node, seen through the API with the node's own credentials

GPU_RESOURCE="nvidia.com/gpu"
# One look: the Ready condition and the allocatable GPUs, tab-separated (either may be empty).
NODE_FIELDS='{.status.conditions[?(@.type=="Ready")].status}{"\t"}{.status.allocatable.nvidia\.com/gpu}'
ALREADY_JOINED=false # joined before this run, kubelet active
KUBELET_RESTARTED=false
NODE_STATE=""  # not-found | not-ready | no-gpus | too-few | too-many | ok | api-error
NODE_READY=""
NODE_GPUS=""
NODE_ERROR=""

# observe_node: one bounded look at this host's Node; sets NODE_STATE and friends.
observe_node() {
  local out err rc=0
  err="$(temp_path kubectl.err)"
  out="$(kubectl --kubeconfig "${KUBELET_KUBECONFIG}" --request-timeout=20s \
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
  elif [[ -z "${EXPECTED_GPUS:-}" ]]; then
    NODE_STATE=ok
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
  local ns="${DEVICE_PLUGIN_NAMESPACE:-nvidia-device-plugin}" plugin_pods
  plugin_pods="kubectl -n ${ns} get pods -o wide --field-selector spec.nodeName=${NODE_NAME}"
  case "${NODE_STATE}" in
    not-found)
      echo "Node ${NODE_NAME} is not registered: the kubelet never reached the API server, or registered another name (a host joined before under another node name: remove that node's entry, run 'sudo kubeadm reset -f' on the host, then add it); look at 'journalctl -u kubelet' on this host"
      ;;
    not-ready)
      echo "Node ${NODE_NAME} is not Ready (Ready=${NODE_READY:-none}): look at 'kubectl describe node ${NODE_NAME}' (the CNI pod on it, kubelet conditions) and 'journalctl -u kubelet' on this host"
      ;;
    no-gpus)
      echo "Node ${NODE_NAME} is Ready but has no allocatable ${GPU_RESOURCE}: the device plugin pod on it or the nvidia container runtime is not working (${plugin_pods}; kubectl -n ${ns} logs <that pod>; on this host: containerd config dump, /etc/containerd/conf.d/99-nvidia.toml; after a reboot, a kernel without an NVIDIA module: systemctl status gpu-cluster-nvidia-boot-check)"
      ;;
    too-few | too-many)
      echo "Node ${NODE_NAME} reports ${NODE_GPUS} allocatable ${GPU_RESOURCE}, expected ${EXPECTED_GPUS}: check nvidia-smi on this host, the MIG/time-slicing config (kubectl -n ${ns} get configmap, ${plugin_pods})"
      ;;
    api-error)
      echo "cannot read Node ${NODE_NAME} from the API server: ${NODE_ERROR:-unknown error}"
      ;;
    *)
      echo "Node ${NODE_NAME} Ready${EXPECTED_GPUS:+ with ${NODE_GPUS} allocatable ${GPU_RESOURCE}}"
      ;;
  esac
}

# A kubelet registers its Node once, when it starts (kubernetes pkg/kubelet/
# kubelet_node_status.go registerWithAPIServer): on a host joined before, whose Node a drain
# deleted since (a host whose key changed is drained as a new machine), only a restart registers
# it again. True when it restarted the kubelet (once).
register_again_when_deleted() {
  [[ "${NODE_STATE}" == not-found && "${ALREADY_JOINED}" == true &&
    "${KUBELET_RESTARTED}" == false ]] || return 1
  log "this host is joined, but Node ${NODE_NAME} is gone (deleted by a drain): restarting" \
    "kubelet, which registers it again"
  systemctl restart kubelet
  KUBELET_RESTARTED=true
}

# wait_for <states that end the wait> <seconds> <what>: look until the Node reaches one.
wait_for_node() {
  local wanted="$1" limit="$2" deadline last="" now
  deadline=$((SECONDS + limit))
  while true; do
    observe_node
    if [[ " ${wanted} " == *" ${NODE_STATE} "* ]]; then
      return 0
    fi
    if register_again_when_deleted; then
      continue
    fi
    now="${NODE_STATE}/${NODE_READY}/${NODE_GPUS}"
    if [[ "${now}" != "${last}" ]]; then
      log "waiting: $(describe_state) ($((deadline - SECONDS))s left)"
      last="${now}"
    fi
    if ((SECONDS >= deadline)); then
      fatal "after ${limit}s: $(describe_state)"
    fi
    sleep "${POLL_SECONDS:-5}"
  done
}

# Node check: registered and Ready (the GPU count is the next check's).
wait_node_ready() {
  wait_for_node "no-gpus too-few too-many ok" "${READY_TIMEOUT_SECONDS:-600}"
  log "Node ${NODE_NAME} Ready"
}

# Capacity check: every GPU of the instance type allocatable (the device plugin's work).
wait_gpu_capacity() {
  if [[ -z "${EXPECTED_GPUS:-}" ]]; then
    log "no capacity check (validation disabled)"
    return 0
  fi
  wait_for_node ok "${CAPACITY_TIMEOUT_SECONDS:-900}"
  log "$(describe_state)"
}

main() {
  init_script join
  check_inputs
  make_temp_dir
  [[ -z "${CHANGE:-}" ]] || log "after host change ${CHANGE}"
  run_steps \
    leave_other_cluster \
    join_cluster \
    verify_joined \
    wait_node_ready \
    wait_gpu_capacity
}

main "$@"
