#!/usr/bin/env bash
# pull-images.sh: pull the container images every GPU node runs first (the device plugin, the
# validation Job) into containerd's Kubernetes namespace, so that nodes booted from a baked image
# start them without a download (the kubelet's default pull policy for a tagged image is
# IfNotPresent).
#
# Inputs:
#   IMAGES   space-separated image references, each with a tag or digest (required)
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
    pull_missing_images \
    verify_images
}

main "$@"
