#!/usr/bin/env bash
# pull-images.sh: pull the container images a host runs first (on a GPU node the device plugin,
# the validation Job and the CNI; on the control plane kubeadm's own images and the CNI) into
# containerd's Kubernetes namespace, so that hosts booted from a baked image start them without
# a download (the kubelet's default pull policy for a tagged image is IfNotPresent, and kubeadm
# init pulls only what the runtime lacks).
#
# Inputs:
#   IMAGES          space-separated image references, each with a tag or digest (required)
#   KUBEADM_IMAGES  true: also the images `kubeadm config images list` names for the installed
#                   kubeadm's version (what `kubeadm init` runs); false (default): only IMAGES
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

check_inputs() {
  require_vars IMAGES
  local ref
  for ref in ${IMAGES}; do
    [[ "${ref}" == *:* || "${ref}" == *@sha256:* ]] ||
      fatal "image '${ref}' has no tag or digest; expected a pinned reference like repo/name:v1.2.3"
  done
  [[ "${KUBEADM_IMAGES:-false}" =~ ^(true|false)$ ]] ||
    fatal "KUBEADM_IMAGES must be true or false, got '${KUBEADM_IMAGES}'"
}

# add_kubeadm_images: with KUBEADM_IMAGES=true, the images the installed kubeadm's version runs
# (etcd, the API server, controller manager, scheduler, kube-proxy, CoreDNS, pause) join IMAGES,
# each pinned to that version: the list `kubeadm init` pulls when they are missing.
add_kubeadm_images() {
  [[ "${KUBEADM_IMAGES:-false}" == true ]] || return 0
  local version listed
  version="$(kubeadm version -o short)" ||
    fatal "KUBEADM_IMAGES=true needs kubeadm, and 'kubeadm version' failed; run" \
      "install-kube-tools.sh before this step"
  listed="$(kubeadm config images list --kubernetes-version "${version}")" ||
    fatal "kubeadm ${version} could not list its images; look at 'kubeadm config images list'" \
      "on the builder, then pulumi up again"
  IMAGES="${IMAGES} $(tr '\n' ' ' <<<"${listed}")"
  log "kubeadm ${version} images: $(tr '\n' ' ' <<<"${listed}")"
}

pull_missing_images() {
  local ref present
  present="$(ctr --namespace k8s.io images ls --quiet)"
  for ref in ${IMAGES}; do
    if grep -qxF "${ref}" <<<"${present}"; then
      log "${ref}: already present"
      continue
    fi
    retry 5 timeout -k 10 600 ctr --namespace k8s.io images pull "${ref}" >/dev/null
    log "${ref}: pulled"
  done
}

verify_images() {
  local ref present
  present="$(ctr --namespace k8s.io images ls --quiet)"
  for ref in ${IMAGES}; do
    grep -qxF "${ref}" <<<"${present}" ||
      fatal "image ${ref} expected in containerd (namespace k8s.io) after its pull, not found;" \
        "look at 'ctr --namespace k8s.io images ls' on the builder, then pulumi up again"
  done
  log "every image present"
}

main() {
  init_script pull-images
  run_steps \
    check_inputs \
    add_kubeadm_images \
    pull_missing_images \
    verify_images
}

main "$@"
