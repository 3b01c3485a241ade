#!/usr/bin/env bash
# install-cni.sh: the pod network (flannel, one pinned release manifest) on a cluster this
# stack initialized, then wait until its DaemonSet has rolled out and the control-plane
# Node is Ready. Skips the download and apply when the pinned release already runs.
#
# Inputs:
#   FLANNEL_VERSION       flannel release tag, e.g. v0.27.4 (required)
#   FLANNEL_MANIFEST_SHA256  sha256 of that release's kube-flannel.yml as downloaded (required):
#                         nothing else is applied with admin rights
#   FLANNEL_IMAGE         ghcr.io/flannel-io/flannel:<FLANNEL_VERSION>@sha256:<digest> (required):
#                         what the manifest's flannel containers run, by digest
#   FLANNEL_CNI_PLUGIN_IMAGE  ghcr.io/flannel-io/flannel-cni-plugin:<tag>@sha256:<digest>
#                         (required): what its install-cni-plugin container runs, by digest (it
#                         copies the CNI binary root runs on every node)
#   POD_SUBNET            pod network CIDR given to kubeadm init (required)
#   NODE_NAME             the control-plane Node that must become Ready (required)
#   CNI_TIMEOUT_SECONDS   bound on the rollout and on the Node Ready wait, each (default 300)
#   (plus the tunables listed in lib/common.sh)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

ADMIN_CONF=/etc/kubernetes/admin.conf
FLANNEL_NAMESPACE=kube-flannel
FLANNEL_DAEMONSET=kube-flannel-ds
# The pod network the release manifest ships with; replaced by POD_SUBNET.
FLANNEL_DEFAULT_NETWORK=10.244.0.0/16
FLANNEL_REPOSITORY=ghcr.io/flannel-io/flannel
CNI_PLUGIN_REPOSITORY=ghcr.io/flannel-io/flannel-cni-plugin
DIGEST_RE='@sha256:[0-9a-f]{64}$'

check_inputs() {
  require_vars FLANNEL_VERSION FLANNEL_MANIFEST_SHA256 FLANNEL_IMAGE FLANNEL_CNI_PLUGIN_IMAGE \
    POD_SUBNET NODE_NAME
  [[ "${FLANNEL_MANIFEST_SHA256}" =~ ^[0-9a-f]{64}$ ]] ||
    fatal "FLANNEL_MANIFEST_SHA256 must be 64 hex digits, got '${FLANNEL_MANIFEST_SHA256}'"
  [[ "${FLANNEL_VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    fatal "FLANNEL_VERSION must be a release tag like v0.27.4, got '${FLANNEL_VERSION}'"
  [[ "${FLANNEL_IMAGE}" == "${FLANNEL_REPOSITORY}:${FLANNEL_VERSION}@"* &&
    "${FLANNEL_IMAGE}" =~ ${DIGEST_RE} ]] ||
    fatal "FLANNEL_IMAGE must be ${FLANNEL_REPOSITORY}:${FLANNEL_VERSION}@sha256:<64 hex>," \
      "got '${FLANNEL_IMAGE}'"
  [[ "${FLANNEL_CNI_PLUGIN_IMAGE}" == "${CNI_PLUGIN_REPOSITORY}:"* &&
    "${FLANNEL_CNI_PLUGIN_IMAGE}" =~ ${DIGEST_RE} ]] ||
    fatal "FLANNEL_CNI_PLUGIN_IMAGE must be ${CNI_PLUGIN_REPOSITORY}:<tag>@sha256:<64 hex>," \
      "got '${FLANNEL_CNI_PLUGIN_IMAGE}'"
  [[ "${POD_SUBNET}" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] ||
    fatal "POD_SUBNET must be a CIDR, got '${POD_SUBNET}'"
  [[ -f "${ADMIN_CONF}" ]] || fatal "${ADMIN_CONF} not found; run init-control-plane.sh first"
}

manifest_url() {
  printf 'https://github.com/flannel-io/flannel/releases/download/%s/kube-flannel.yml\n' \
    "${FLANNEL_VERSION}"
}

# verify_manifest FILE: the downloaded manifest is the pinned one, byte for byte, before anything
# reads or applies it.
verify_manifest() {
  local found
  found="$(sha256sum "$1" | cut -d' ' -f1)"
  [[ "${found}" == "${FLANNEL_MANIFEST_SHA256}" ]] ||
    fatal "the flannel ${FLANNEL_VERSION} manifest has sha256 ${found}, expected" \
      "${FLANNEL_MANIFEST_SHA256}; not applying it ($(manifest_url) changed, or the download" \
      "was tampered with)"
  log "flannel ${FLANNEL_VERSION} manifest sha256 ${found} verified"
}

# running_images: the images of the DaemonSet's init containers, then of its containers, one
# line (empty when it is not there).
running_images() {
  admin_kubectl -n "${FLANNEL_NAMESPACE}" get daemonset "${FLANNEL_DAEMONSET}" --ignore-not-found \
    -o 'jsonpath={.spec.template.spec.initContainers[*].image} {.spec.template.spec.containers[*].image}'
}

# The release manifest runs the CNI plugin in install-cni-plugin, then flannel in install-cni
# and kube-flannel.
pinned_images() {
  printf '%s %s %s\n' "${FLANNEL_CNI_PLUGIN_IMAGE}" "${FLANNEL_IMAGE}" "${FLANNEL_IMAGE}"
}

# pin_images FILE: each image the manifest names becomes its pinned reference by digest
# (flannel's: FLANNEL_IMAGE, the CNI plugin's: FLANNEL_CNI_PLUGIN_IMAGE); a manifest that names
# any other image, or flannel at another release, or not each of them, is not applied.
pin_images() {
  local file=$1 pinned counts
  pinned="$(temp_path kube-flannel.pinned.yml)"
  counts="$(awk -v flannel="${FLANNEL_REPOSITORY}:" -v plugin="${CNI_PLUGIN_REPOSITORY}:" \
    -v release="${FLANNEL_REPOSITORY}:${FLANNEL_VERSION}" \
    -v flannel_pin="${FLANNEL_IMAGE}" -v plugin_pin="${FLANNEL_CNI_PLUGIN_IMAGE}" \
    -v out="${pinned}" '
    match($0, /^[[:space:]]*(- )?image:[[:space:]]*/) {
      lead = substr($0, 1, RLENGTH)
      ref = substr($0, RLENGTH + 1)
      if (index(ref, plugin) == 1) { print lead plugin_pin > out; p++; next }
      if (ref == release) { print lead flannel_pin > out; f++; next }
      other = other " " ref
    }
    { print > out }
    END { printf "%d %d%s\n", f, p, other }' "${file}")"
  [[ "${counts}" == "2 1" ]] ||
    fatal "expected the flannel ${FLANNEL_VERSION} manifest to run" \
      "${FLANNEL_REPOSITORY}:${FLANNEL_VERSION} twice and ${CNI_PLUGIN_REPOSITORY} once and" \
      "nothing else; found '${counts}' (flannel, plugin, others); $(manifest_url) changed shape"
  mv "${pinned}" "${file}"
  log "flannel's images pinned by digest: ${FLANNEL_IMAGE}, ${FLANNEL_CNI_PLUGIN_IMAGE}"
}

apply_manifest() {
  local images manifest count
  images="$(running_images)"
  [[ -n "${images// /}" ]] || images=""
  if [[ "${images}" == "$(pinned_images)" ]]; then
    log "flannel ${FLANNEL_VERSION} already applied (${FLANNEL_IMAGE}), not downloading"
    return 0
  fi
  manifest="$(temp_path kube-flannel.yml)"
  log "downloading flannel ${FLANNEL_VERSION} manifest"
  download "$(manifest_url)" "${manifest}"
  verify_manifest "${manifest}"
  count="$(awk -v want="\"Network\": \"${FLANNEL_DEFAULT_NETWORK}\"" \
    'index($0, want) { n++ } END { print n + 0 }' "${manifest}")"
  [[ "${count}" == 1 ]] ||
    fatal "expected one \"Network\": \"${FLANNEL_DEFAULT_NETWORK}\" in the flannel" \
      "${FLANNEL_VERSION} manifest, found ${count}; $(manifest_url) changed shape"
  sed -i "s#\"Network\": \"${FLANNEL_DEFAULT_NETWORK}\"#\"Network\": \"${POD_SUBNET}\"#" "${manifest}"
  pin_images "${manifest}"
  log "applying flannel ${FLANNEL_VERSION} with pod network ${POD_SUBNET}${images:+ (was ${images})}"
  admin_kubectl apply -f "${manifest}" >&2
}

wait_for_rollout() {
  local limit="${CNI_TIMEOUT_SECONDS:-300}"
  # kubectl's own --timeout bounds the watch; timeout(1) bounds kubectl itself (a function
  # such as admin_kubectl cannot run under it, so the kubeconfig is spelled out).
  timeout -k 10 "$((limit + 30))" kubectl --kubeconfig="${ADMIN_CONF}" \
    -n "${FLANNEL_NAMESPACE}" rollout status \
    "daemonset/${FLANNEL_DAEMONSET}" --timeout="${limit}s" >&2 ||
    fatal "flannel DaemonSet not rolled out after ${limit}s; look at" \
      "'kubectl -n ${FLANNEL_NAMESPACE} get pods -o wide' and their logs"
  log "flannel DaemonSet rolled out"
}

wait_for_node_ready() {
  local limit="${CNI_TIMEOUT_SECONDS:-300}"
  timeout -k 10 "$((limit + 30))" kubectl --kubeconfig="${ADMIN_CONF}" \
    wait --for=condition=Ready "node/${NODE_NAME}" \
    --timeout="${limit}s" >&2 ||
    fatal "Node ${NODE_NAME} not Ready ${limit}s after the CNI rolled out; look at" \
      "'kubectl describe node ${NODE_NAME}' and 'journalctl -u kubelet' on this host"
  log "Node ${NODE_NAME} Ready"
}

main() {
  init_script cni
  check_inputs
  make_temp_dir
  run_steps \
    apply_manifest \
    wait_for_rollout \
    wait_for_node_ready
}

main "$@"
