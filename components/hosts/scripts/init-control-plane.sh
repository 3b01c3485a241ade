#!/usr/bin/env bash
# init-control-plane.sh: `kubeadm init` this host as the cluster's control plane, from an
# InitConfiguration + ClusterConfiguration file. Skips when the cluster already exists
# (admin.conf present and the API answers): a second run initializes nothing.
#
# Hardened as the CIS Kubernetes benchmark asks of a kubeadm control plane: an audit policy and
# log (/var/log/kubernetes/audit), Secrets encrypted at rest (secretbox, a key made on this host
# once and never printed), Pod Security `baseline` enforced cluster-wide (namespaces that need
# more, like the device plugin's, say so with their own label), kubelet serving certificates
# signed by the cluster CA and verified by the API server, profiling off.
#
# Inputs:
#   CLUSTER_NAME            clusterName in the kubeadm config (required)
#   NODE_NAME               this host's Node name (required)
#   KUBERNETES_MINOR        e.g. 1.35; the version is the installed kubeadm's patch of it (required)
#   CONTROL_PLANE_ENDPOINT  host:port nodes join, e.g. 10.42.3.7:6443 (required)
#   ADVERTISE_ADDRESS       the API server's address on this host (private IP) (required)
#   POD_SUBNET              pod network CIDR, must match the CNI's (required)
#   SERVICE_SUBNET          service CIDR (required)
#   CERT_SANS               comma-separated extra API server certificate names: the addresses
#                           operators use (public and private IP, DNS names) (required)
#   INIT_TIMEOUT_SECONDS    bound on kubeadm init (default 600)
#   API_WAIT_SECONDS        how long to wait for the API server to answer (default 180)
#   SERVING_NAMES           the names this host's kubelet may serve as, one a line, as openssl
#                           prints them ("DNS:<node name>", "DNS:<private DNS name>",
#                           "IP Address:<private IP>"): the program's, not what the kubelet
#                           reports (required)
#   CSR_WAIT_SECONDS        how long to wait for this kubelet's serving certificate request
#                           (default 120)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
CONFIG_DIR=/etc/kubernetes/gpu-cluster
KUBEADM_CONFIG=${CONFIG_DIR}/kubeadm-init.yaml
AUDIT_POLICY=${CONFIG_DIR}/audit-policy.yaml
ENCRYPTION_CONFIG=${CONFIG_DIR}/encryption-config.yaml
ADMISSION_CONFIG=${CONFIG_DIR}/admission-config.yaml
AUDIT_LOG_DIR=/var/log/kubernetes/audit
CIDR_RE='^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$'
NAME_RE='^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$'

check_inputs() {
  require_vars CLUSTER_NAME NODE_NAME KUBERNETES_MINOR CONTROL_PLANE_ENDPOINT \
    ADVERTISE_ADDRESS POD_SUBNET SERVICE_SUBNET CERT_SANS SERVING_NAMES
  require_serving_names
  local san sans=()
  [[ "${KUBERNETES_MINOR}" =~ ^1\.[0-9]+$ ]] ||
    fatal "KUBERNETES_MINOR must be a minor version like 1.35, got '${KUBERNETES_MINOR}'"
  [[ "${CONTROL_PLANE_ENDPOINT}" =~ ^[A-Za-z0-9.-]+:[0-9]+$ ]] ||
    fatal "CONTROL_PLANE_ENDPOINT must be host:port, got '${CONTROL_PLANE_ENDPOINT}'"
  [[ "${ADVERTISE_ADDRESS}" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] ||
    fatal "ADVERTISE_ADDRESS must be an IPv4 address, got '${ADVERTISE_ADDRESS}'"
  [[ "${POD_SUBNET}" =~ ${CIDR_RE} ]] || fatal "POD_SUBNET must be a CIDR, got '${POD_SUBNET}'"
  [[ "${SERVICE_SUBNET}" =~ ${CIDR_RE} ]] ||
    fatal "SERVICE_SUBNET must be a CIDR, got '${SERVICE_SUBNET}'"
  # Pasted into the kubeadm config's YAML: a DNS label as gpu-cluster:clusterName is
  # (components/settings/fields.py `_dns_label`), so it can close no quote.
  [[ "${CLUSTER_NAME}" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ && ${#CLUSTER_NAME} -le 40 ]] ||
    fatal "CLUSTER_NAME must be a lowercase DNS label of at most 40 characters like" \
      "gpu-dev, got '${CLUSTER_NAME}'"
  [[ "${NODE_NAME}" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] ||
    fatal "NODE_NAME must be a lowercase DNS name, got '${NODE_NAME}'"
  IFS=, read -r -a sans <<<"${CERT_SANS}"
  for san in "${sans[@]}"; do
    [[ "${san}" =~ ${NAME_RE} ]] || fatal "CERT_SANS: '${san}' is not an IP address or DNS name"
  done
}

# The version kubeadm deploys: the installed kubeadm's own (its patch of the pinned minor).
kubernetes_version() {
  local found
  found="$(kubeadm version -o short)"
  [[ "${found}" == "v${KUBERNETES_MINOR}."* ]] ||
    fatal "kubeadm v${KUBERNETES_MINOR}.x expected, found ${found}; run install-kube-tools.sh"
  printf '%s\n' "${found}"
}

cert_sans_yaml() {
  local san sans=()
  IFS=, read -r -a sans <<<"${CERT_SANS}"
  for san in "${sans[@]}"; do
    printf '    - "%s"\n' "${san}"
  done
}

# The API server's audit policy (audit.k8s.io/v1): no health probes; Secrets, ConfigMaps and
# token requests at Metadata (never their bodies); every other change with its request;
# everything else at Metadata.
write_audit_policy() {
  write_file_if_changed "${AUDIT_POLICY}" 0600 >/dev/null <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version"]
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets", "configmaps", "serviceaccounts/token"]
      - group: authentication.k8s.io
        resources: ["tokenreviews"]
  - level: Request
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: Metadata
YAML
}

# Secrets encrypted at rest (apiserver.config.k8s.io/v1 EncryptionConfiguration, secretbox).
# The key is made here once and kept: a new key would leave the stored Secrets unreadable.
write_encryption_config() {
  if [[ -s "${ENCRYPTION_CONFIG}" ]]; then
    log "${ENCRYPTION_CONFIG}: present, keeping its key"
    return 0
  fi
  local key
  # 32 bytes from the kernel's CSPRNG (a read of at most 256 bytes from /dev/urandom is never
  # short); a failing head fails the assignment under pipefail and the ERR trap names the step.
  key="$(head -c 32 /dev/urandom | base64 -w0)"
  install -d -m 0700 "${CONFIG_DIR}"
  (
    umask 077
    cat >"${ENCRYPTION_CONFIG}" <<YAML
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: ["secrets"]
    providers:
      - secretbox:
          keys:
            - name: key1
              secret: "${key}"
      - identity: {}
YAML
  )
  log "${ENCRYPTION_CONFIG}: written with a new key"
}

# Pod Security admission's cluster-wide defaults: baseline enforced, restricted audited and
# warned; kube-system (the control plane's own pods) exempt.
write_admission_config() {
  write_file_if_changed "${ADMISSION_CONFIG}" 0600 >/dev/null <<'YAML'
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: baseline
        enforce-version: latest
        audit: restricted
        audit-version: latest
        warn: restricted
        warn-version: latest
      exemptions:
        usernames: []
        runtimeClasses: []
        namespaces: [kube-system]
YAML
}

write_hardening() {
  write_audit_policy
  write_encryption_config
  write_admission_config
  install -d -m 0700 "${AUDIT_LOG_DIR}"
}

# write_kubeadm_config <version>: the init config, kept for `kubeadm upgrade` and debugging.
# kubeadm always creates one bootstrap token at init; nodes get their own, so it lives 15m.
write_kubeadm_config() {
  write_file_if_changed "${KUBEADM_CONFIG}" 0600 >/dev/null <<YAML
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
  - description: "kubeadm init default; each node joins with a token of its own"
    ttl: 15m0s
    usages: [signing, authentication]
    groups: [system:bootstrappers:kubeadm:default-node-token]
localAPIEndpoint:
  advertiseAddress: "${ADVERTISE_ADDRESS}"
  bindPort: ${CONTROL_PLANE_ENDPOINT##*:}
nodeRegistration:
  name: "${NODE_NAME}"
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: "${CLUSTER_NAME}"
kubernetesVersion: "$1"
controlPlaneEndpoint: "${CONTROL_PLANE_ENDPOINT}"
networking:
  podSubnet: "${POD_SUBNET}"
  serviceSubnet: "${SERVICE_SUBNET}"
apiServer:
  certSANs:
$(cert_sans_yaml)
  extraArgs:
    - {name: audit-policy-file, value: "${AUDIT_POLICY}"}
    - {name: audit-log-path, value: "${AUDIT_LOG_DIR}/audit.log"}
    - {name: audit-log-maxage, value: "30"}
    - {name: audit-log-maxbackup, value: "10"}
    - {name: audit-log-maxsize, value: "100"}
    - {name: encryption-provider-config, value: "${ENCRYPTION_CONFIG}"}
    - {name: admission-control-config-file, value: "${ADMISSION_CONFIG}"}
    - {name: kubelet-certificate-authority, value: /etc/kubernetes/pki/ca.crt}
    - {name: profiling, value: "false"}
  extraVolumes:
    - {name: gpu-cluster-config, hostPath: "${CONFIG_DIR}", mountPath: "${CONFIG_DIR}", readOnly: true, pathType: Directory}
    - {name: audit-log, hostPath: "${AUDIT_LOG_DIR}", mountPath: "${AUDIT_LOG_DIR}", readOnly: false, pathType: DirectoryOrCreate}
controllerManager:
  extraArgs:
    - {name: profiling, value: "false"}
scheduler:
  extraArgs:
    - {name: profiling, value: "false"}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
serverTLSBootstrap: true
YAML
}

init_cluster() {
  if [[ -f "${ADMIN_CONF}" ]]; then
    if wait_for_api "${API_WAIT_SECONDS:-180}"; then
      log "already initialized (${ADMIN_CONF} exists, API answers), skipping kubeadm init"
      return 0
    fi
    fatal "${ADMIN_CONF} exists but the API server does not answer /readyz; not re-initializing." \
      "Look at 'journalctl -u kubelet' and 'crictl ps -a' on this host; to start over run" \
      "'kubeadm reset -f' here and 'pulumi up' again"
  fi
  local version
  version="$(kubernetes_version)"
  write_hardening
  write_kubeadm_config "${version}"
  log "kubeadm init ${CLUSTER_NAME} (Kubernetes ${version}, endpoint ${CONTROL_PLANE_ENDPOINT})"
  timeout -k 30 "${INIT_TIMEOUT_SECONDS:-600}" \
    kubeadm init --config "${KUBEADM_CONFIG}" --skip-token-print >&2
  INITIALIZED_NOW=yes
}

verify_api() {
  [[ -f "${ADMIN_CONF}" ]] || fatal "${ADMIN_CONF} expected after kubeadm init, not found"
  wait_for_api "${API_WAIT_SECONDS:-180}" ||
    fatal "API server did not answer /readyz within ${API_WAIT_SECONDS:-180}s after kubeadm init;" \
      "look at 'journalctl -u kubelet' and 'crictl ps -a' on this host"
  log "API server ready at ${CONTROL_PLANE_ENDPOINT}"
}

# Only after this run's kubeadm init: on a re-run the first run approved it (and a cluster made
# before serverTLSBootstrap has no such request to wait for).
approve_own_kubelet() {
  if [[ "${INITIALIZED_NOW:-no}" != yes ]]; then
    log "cluster initialized earlier; its kubelet's serving certificate was handled then"
    return 0
  fi
  local -a names
  mapfile -t names <<<"${SERVING_NAMES}"
  approve_kubelet_serving_csr "${NODE_NAME}" "${CSR_WAIT_SECONDS:-120}" "${names[@]}"
}

# Every node's kubelet serves with a certificate of the cluster CA (serverTLSBootstrap), which
# the API server verifies (--kubelet-certificate-authority); kube-controller-manager approves no
# such request. A timer here approves, every 20 s, the pending kubelet-serving requests each
# Node makes with its own identity (system:node:<name>) for the names the program recorded for
# it (ConfigMap kube-system/gpu-cluster-serving-<name>, which no node may write: its
# instance's private address and DNS name, not what the kubelet reports), read as
# `kubelet_serving_problem` reads them; any other stays pending, and the journal says why.
APPROVER=/usr/local/sbin/gpu-cluster-approve-kubelet-serving
APPROVER_UNIT=gpu-cluster-approve-kubelet-serving
SERVING_NAMES_PREFIX=gpu-cluster-serving-

# approver_program: the timer's program, holding lib/common.sh's own request check.
approver_program() {
  cat <<'HEAD'
#!/usr/bin/env bash
# Written by gpu-cluster (init-control-plane.sh): approve the pending kubelet serving
# certificate requests each Node makes for the names the program recorded for it.
set -euo pipefail
HEAD
  printf 'CSR_FIELD_SEPARATOR=%q\nCSR_FIELDS=%q\nPREFIX=%q\n' "${CSR_FIELD_SEPARATOR}" \
    "${CSR_FIELDS}" "${SERVING_NAMES_PREFIX}"
  declare -f kubelet_serving_problem
  cat <<'APPROVE'
admin_kubectl() { kubectl --kubeconfig=/etc/kubernetes/admin.conf --request-timeout=20s "$@"; }
admin_kubectl get csr -o "${CSR_FIELDS}" |
  while IFS="${CSR_FIELD_SEPARATOR}" read -r name user signer usages request state; do
    [[ -z "${state}" && "${signer}" == kubernetes.io/kubelet-serving ]] || continue
    [[ "${user}" == system:node:* ]] || continue
    node="${user#system:node:}"
    names="$(admin_kubectl -n kube-system get configmap "${PREFIX}${node}" --ignore-not-found \
      -o 'jsonpath={.data.subjectAltNames}')" || names=""
    if [[ -z "${names}" ]]; then
      echo "not approving ${name} of ${node}: no record of its names (ConfigMap" \
        "kube-system/${PREFIX}${node})"
      continue
    fi
    mapfile -t allowed <<<"${names}"
    problem="$(kubelet_serving_problem "${node}" "${usages}" "${request}" "${allowed[@]}")"
    if [[ -n "${problem}" ]]; then
      echo "not approving ${name} of ${node}, it stays pending: ${problem}"
      continue
    fi
    admin_kubectl certificate approve "${name}"
  done
APPROVE
}

install_serving_certificate_approver() {
  local changed=""
  changed+="$(approver_program | write_file_if_changed "${APPROVER}" 0755)"
  changed+="$(write_file_if_changed "/etc/systemd/system/${APPROVER_UNIT}.service" <<UNIT
[Unit]
Description=gpu-cluster: approve kubelet serving certificates of registered Nodes
[Service]
Type=oneshot
ExecStart=${APPROVER}
UNIT
)"
  changed+="$(write_file_if_changed "/etc/systemd/system/${APPROVER_UNIT}.timer" <<UNIT
[Unit]
Description=gpu-cluster: approve kubelet serving certificates every 20 s
[Timer]
OnBootSec=30s
OnUnitActiveSec=20s
[Install]
WantedBy=timers.target
UNIT
)"
  if [[ "${changed}" == *changed* ]]; then
    systemctl daemon-reload
  fi
  enable_service "${APPROVER_UNIT}.timer"
}

main() {
  init_script init
  check_inputs
  make_temp_dir
  run_steps \
    init_cluster \
    verify_api \
    approve_own_kubelet \
    install_serving_certificate_approver
}

main "$@"
