#!/usr/bin/env bash
# renew-certificates.sh: keep the certificates kubeadm made on a control-plane host from expiring
# when no `kubeadm upgrade` renewed them (each lives one year): those that expire within
# RENEW_WITHIN_DAYS are renewed (`kubeadm certs renew <name>`), and the control plane's static
# Pods are restarted to load them (kubeadm's "Certificate Management with kubeadm": dynamic
# reload is not supported for every component; a static Pod restarts when its manifest leaves
# /etc/kubernetes/manifests and comes back). Prints, last, one JSON line with admin.conf's client
# certificate's expiry: the credential the program's Kubernetes provider uses
# (read-kubeconfig.sh reads it again when it changed). Runs once per renewal period of the
# program's clock; safe to re-run, also after being cut off with the manifests moved aside.
#
# Inputs:
#   CHECK_PERIOD         the renewal period of the program's clock this run is for (required)
#   RENEW_WITHIN_DAYS    renew a certificate that expires within this many days (required)
#   RENEW_CONTROL_PLANE  true: every kubeadm certificate (a control plane the stack manages);
#                        false: admin.conf alone, the others reported (required)
#   API_DOWN_SECONDS     how long the kubelet may take to stop the API server (default 120)
#   API_UP_SECONDS       how long the API server may take to answer again (default 300)
#   POLL_SECONDS         how often it asks the API server while it waits (default 5)
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

MANIFESTS=/etc/kubernetes/manifests
# Where the static Pods' manifests wait while their Pods stop (outside the kubelet's directory).
HELD=/etc/kubernetes/gpu-cluster-restart
STATIC_PODS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
# kubeconfig files whose certificate no component reloads: renewing them restarts nothing.
NO_RESTART=(admin.conf super-admin.conf)
ADMIN_CONF=/etc/kubernetes/admin.conf
API_DOWN_SECONDS="${API_DOWN_SECONDS:-120}"
API_UP_SECONDS="${API_UP_SECONDS:-300}"
POLL_SECONDS="${POLL_SECONDS:-5}"

check_inputs() {
  require_vars CHECK_PERIOD RENEW_WITHIN_DAYS RENEW_CONTROL_PLANE
  [[ "${CHECK_PERIOD}" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] ||
    fatal "CHECK_PERIOD must be a date (YYYY-MM-DD), got '${CHECK_PERIOD}'"
  [[ "${RENEW_WITHIN_DAYS}" =~ ^[1-9][0-9]{0,2}$ ]] ||
    fatal "RENEW_WITHIN_DAYS must be a number of days (1-999), got '${RENEW_WITHIN_DAYS}'"
  [[ "${RENEW_CONTROL_PLANE}" =~ ^(true|false)$ ]] ||
    fatal "RENEW_CONTROL_PLANE must be true or false, got '${RENEW_CONTROL_PLANE}'"
  [[ -r "${ADMIN_CONF}" ]] ||
    fatal "${ADMIN_CONF} not found on this host; it must be a kubeadm control-plane node"
}

# One line per certificate into $1: name, expiry (RFC 3339), seconds left, externally managed,
# missing. From kubeadm's structured output (`kubeadm certs check-expiration -o json`, output API
# v1alpha3 CertificateExpirationInfo: cmd/kubeadm/app/apis/output/v1alpha3/types.go; with -o json
# kubeadm prints nothing else on stdout: util/output ResourcePrinterWrapper.Printf is silent),
# read with a JSON parser (python3, which every Ubuntu image has: cloud-init runs on it).
read_certificates() {
  local raw
  raw="$(temp_path expiration.json)"
  kubeadm certs check-expiration -o json >"${raw}" ||
    fatal "kubeadm certs check-expiration failed (its error is above)"
  python3 - "${raw}" >"$1" <<'PY' || fatal "kubeadm certs check-expiration printed no certificates"
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    info = json.load(f)
if info.get("kind") != "CertificateExpirationInfo":
    sys.exit(f"kubeadm printed {info.get('kind')!r}, not a CertificateExpirationInfo")
for cert in info.get("certificates") or []:
    print("\t".join([
        cert["name"],
        cert.get("expirationDate") or "",
        str(cert.get("residualTime") or 0),
        "yes" if cert.get("externallyManaged") else "no",
        "yes" if cert.get("missing") else "no",
    ]))
PY
}

# Manifests a run cut off after moving them aside left out of the kubelet's directory: back in.
restore_held_manifests() {
  local held
  for held in "${HELD}"/*.yaml; do
    [[ -e "${held}" ]] || continue
    mv -f "${held}" "${MANIFESTS}/$(basename "${held}")"
    log "restored ${MANIFESTS}/$(basename "${held}"), moved aside by a run that was cut off"
    RESTARTED=yes
  done
  if [[ "${RESTARTED:-}" == yes ]]; then
    wait_for_api "${API_UP_SECONDS}" ||
      fatal "the API server did not answer /readyz within ${API_UP_SECONDS}s after its restart"
  fi
}

renew_due() {
  local table name expires left external missing within
  table="$(temp_path certificates.tsv)"
  read_certificates "${table}"
  within=$((RENEW_WITHIN_DAYS * 86400))
  RENEWED=()
  while IFS=$'\t' read -r name expires left external missing; do
    if [[ "${missing}" == yes ]]; then
      log "${name} is missing; not renewed here"
      continue
    fi
    if [[ "${external}" == yes ]]; then
      log "${name} is managed outside kubeadm; not renewed here"
      continue
    fi
    if ((left >= within)); then
      continue
    fi
    if [[ "${RENEW_CONTROL_PLANE}" != true && "${name}" != admin.conf ]]; then
      log "WARNING: ${name} expires ${expires}: renew it on the control plane" \
        "(kubeadm certs renew ${name}, then restart the control plane's static Pods)"
      continue
    fi
    kubeadm certs renew "${name}" >&2 || fatal "kubeadm certs renew ${name} failed"
    log "${name} expired ${expires}; renewed"
    RENEWED+=("${name}")
  done <"${table}"
  if ((${#RENEWED[@]} == 0)); then
    log "no certificate expires within ${RENEW_WITHIN_DAYS} days (period ${CHECK_PERIOD})"
  fi
}

needs_restart() {
  local name skip
  for name in "${RENEWED[@]}"; do
    for skip in "${NO_RESTART[@]}"; do
      if [[ "${name}" == "${skip}" ]]; then
        continue 2
      fi
    done
    return 0
  done
  return 1
}

# kubeadm's procedure: each manifest out of the kubelet's directory (the kubelet stops its Pod),
# then back (it starts a new one with the renewed certificates). The API server answering no
# more shows the kubelet acted on the removal.
restart_static_pods() {
  local pod
  if ! needs_restart; then
    return 0
  fi
  mkdir -p "${HELD}"
  chmod 0700 "${HELD}"
  for pod in "${STATIC_PODS[@]}"; do
    if [[ -f "${MANIFESTS}/${pod}.yaml" ]]; then
      mv -f "${MANIFESTS}/${pod}.yaml" "${HELD}/${pod}.yaml"
    fi
  done
  local deadline=$((SECONDS + API_DOWN_SECONDS))
  while api_answers; do
    if ((SECONDS >= deadline)); then
      restore_held_manifests
      fatal "the API server still answered ${API_DOWN_SECONDS}s after its manifest left" \
        "${MANIFESTS}: is the kubelet running? (systemctl status kubelet)"
    fi
    sleep "${POLL_SECONDS}"
  done
  log "the control plane's static Pods stopped; starting them with the renewed certificates"
  restore_held_manifests
}

print_admin_expiry() {
  local table name expires left external missing
  table="$(temp_path certificates-after.tsv)"
  read_certificates "${table}"
  while IFS=$'\t' read -r name expires left external missing; do
    if [[ "${name}" == admin.conf ]]; then
      [[ "${missing}" == no && -n "${expires}" ]] ||
        fatal "admin.conf holds no certificate kubeadm can read"
      printf '{"adminConfNotAfter": "%s"}\n' "${expires}"
      return 0
    fi
  done <"${table}"
  fatal "kubeadm certs check-expiration lists no admin.conf"
}

main() {
  init_script certificates
  check_inputs
  make_temp_dir
  run_steps restore_held_manifests renew_due restart_static_pods print_admin_expiry
}

main "$@"
