# shellcheck shell=bash
# The cluster-API part of the kubectl stub (see the header of ./kubectl). kubectl_api either
# answers and exits, or returns so the stub's Node handling runs.
# Stands for kubectl 1.35 against a kube-apiserver of the version in state kubectl/api: errors
# as kubectl prints them (k8s.io/kubectl pkg/cmd/util/helpers.go `standardErrorMessage`: "The
# connection to the server <host:port> was refused - did you specify the right host or port?";
# k8s.io/apimachinery pkg/api/errors: 'Error from server (NotFound): ...'), and /version as the
# API server answers it: k8s.io/apimachinery pkg/version `Info`, indented by two spaces, every
# field present, as captured from a v1.35.0 server (`curl -k https://.../version`: major, minor,
# emulationMajor, emulationMinor, minCompatibilityMajor, minCompatibilityMinor, gitVersion,
# gitCommit, gitTreeState, buildDate, goVersion, compiler, platform).

# _ds_json <manifest>: the first DaemonSet of a manifest as "<ns>/<name> <json>", from the
# metadata and the first image under `containers:` (initContainers are skipped, as in kubectl's
# containers[0]).
_ds_json() {
  awk '
    function flush() {
      if (kind == "DaemonSet" && name != "") {
        printf "%s/%s {\"metadata\": {\"name\": \"%s\", \"namespace\": \"%s\"}, ", ns, name, name, ns
        printf "\"spec\": {\"template\": {\"spec\": {\"containers\": [{\"image\": \"%s\"}]}}}}\n", image
      }
      kind = ""; name = ""; ns = "default"; image = ""; in_meta = 0; in_containers = 0
    }
    BEGIN { flush() }
    /^---/ { flush(); next }
    /^kind: / { kind = $2 }
    /^metadata:/ { in_meta = 1; next }
    /^[^ ]/ { in_meta = 0 }
    in_meta && /^  name: / { name = $2 }
    in_meta && /^  namespace: / { ns = $2 }
    /^ +containers:/ { in_containers = 1 }
    in_containers && image == "" && /^ +(- )?image: / { sub(/^ +(- )?image: /, ""); image = $0 }
    END { flush() }
  ' "$1"
}

# _get_object <state-key> <kind "name" for errors> <argv...>: serve `get` of one stored object
# (-o json, or -o jsonpath=<template>); NotFound unless --ignore-not-found.
_get_object() {
  local key="$1" what="$2" output="" j
  shift 2
  local argv=("$@")
  for ((j = 0; j < ${#argv[@]}; j++)); do
    [[ "${argv[j]}" == -o ]] && output="${argv[j + 1]}"
  done
  if ! state_has "${key}"; then
    [[ " ${argv[*]} " == *" --ignore-not-found "* ]] && exit 0
    echo "Error from server (NotFound): ${what} not found" >&2
    exit 1
  fi
  case "${output}" in
    jsonpath=*) python3 "$(dirname "$0")/_kubectl_jsonpath.py" "${output#jsonpath=}" <"${STUB_STATE}/${key}" ;;
    *) cat "${STUB_STATE}/${key}" ;;
  esac
  exit 0
}

# _render_list <argv...>: a List on stdin as `get` prints it: -o jsonpath=<template>, else the
# JSON itself.
_render_list() {
  local argv=("$@") output="" j
  for ((j = 0; j < ${#argv[@]}; j++)); do
    [[ "${argv[j]}" == -o ]] && output="${argv[j + 1]}"
  done
  case "${output}" in
    jsonpath=*) python3 "$(dirname "$0")/_kubectl_jsonpath.py" "${output#jsonpath=}" ;;
    *) cat ;;
  esac
}

# _takes <state key> <--timeout seconds>: the watch lasts the key's seconds (0 when unset): false,
# after the timeout, when the timeout is shorter.
_takes() {
  local needs
  needs="$(state_get "$1" 0)"
  if [[ -n "$2" ]] && awk -v n="${needs}" -v t="$2" 'BEGIN { exit !(t < n) }'; then
    sleep "$2"
    return 1
  fi
  sleep "${needs}"
}

kubectl_api() {
  local args=() kubeconfig="" namespace=default raw="" file="" condition="" timeout="" arg i
  local all=("$@")
  for ((i = 0; i < ${#all[@]}; i++)); do
    arg="${all[i]}"
    case "${arg}" in
      --kubeconfig) i=$((i + 1)) && kubeconfig="${all[i]}" ;;
      --kubeconfig=*) kubeconfig="${arg#--kubeconfig=}" ;;
      -n | --namespace) i=$((i + 1)) && namespace="${all[i]}" ;;
      --namespace=*) namespace="${arg#--namespace=}" ;;
      --raw) i=$((i + 1)) && raw="${all[i]}" ;;
      -f) i=$((i + 1)) && file="${all[i]}" ;;
      --for=*) condition="${arg#--for=}" ;;
      --timeout=*) timeout="${arg#--timeout=}" && timeout="${timeout%s}" ;;
      -o | --request-timeout | --timeout | --field-selector) i=$((i + 1)) ;;
      -*) ;;
      *) args+=("${arg}") ;;
    esac
  done
  if [[ -n "${kubeconfig}" && ! -f "${kubeconfig}" ]]; then
    echo "error: stat ${kubeconfig}: no such file or directory" >&2
    exit 1
  fi
  # A kubeadm control plane's API server is a static Pod: the kubelet stops it when its manifest
  # leaves /etc/kubernetes/manifests and starts it again when it is back (kubeadm's "Certificate
  # Management with kubeadm" restarts it that way). State kubectl/static-pods opts in.
  if state_has kubectl/static-pods && [[ ! -f /etc/kubernetes/manifests/kube-apiserver.yaml ]]; then
    echo "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?" >&2
    printf 'down\n' >>"${STUB_STATE}/kubectl/api-down-seen"
    exit 1
  fi
  if state_has kubectl/api-down; then
    echo "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?" >&2
    exit 1
  fi
  local version minor
  version="$(state_get kubectl/api)"
  minor="${version#v*.}" && minor="${minor%%.*}"
  case "${args[0]:-}" in
    get)
      case "${raw}" in
        "") ;;
        /readyz | /livez)
          # An API server up but not ready (etcd unhealthy) answers 500 with the failed checks.
          if state_has kubectl/never-ready || should_fail kubectl/not-ready-count ||
            { state_has kubectl/ready-at && ! past "$(state_get kubectl/ready-at)"; }; then
            echo 'Error from server (InternalServerError): an error on the server ("[+]ping ok [-]etcd failed: reason withheld readyz check failed") has prevented the request from succeeding' >&2
            exit 1
          fi
          echo ok && exit 0
          ;;
        /version)
          if state_has kubectl/version-body; then
            state_get kubectl/version-body
            exit 0
          fi
          printf '{\n  "major": "1",\n  "minor": "%s",\n  "emulationMajor": "1",\n  "emulationMinor": "%s",\n  "minCompatibilityMajor": "1",\n  "minCompatibilityMinor": "%s",\n  "gitVersion": "%s",\n  "gitCommit": "66452049f3d692768c39c797b21b793dce80314e",\n  "gitTreeState": "clean",\n  "buildDate": "2025-12-17T12:32:07Z",\n  "goVersion": "go1.25.5",\n  "compiler": "gc",\n  "platform": "linux/amd64"\n}\n' \
            "${minor}" "${minor}" "$((minor - 1))" "${version}"
          exit 0
          ;;
        *) echo "Error from server (NotFound): the server could not find ${raw}" >&2 && exit 1 ;;
      esac
      if [[ "${args[1]:-}" =~ ^(lease|leases)$ ]]; then
        _get_object "kubectl/leases/${namespace}/${args[2]}.json" \
          "leases.coordination.k8s.io \"${args[2]}\"" "${all[@]}"
      fi
      if [[ "${args[1]:-}" =~ ^(pod|pods|po)$ ]]; then
        local selector="" node_pods
        for ((i = 0; i < ${#all[@]}; i++)); do
          [[ "${all[i]}" == --field-selector ]] && selector="${all[i + 1]}"
        done
        node_pods="kubectl/pods/${selector}"
        state_has "${node_pods}" && state_get "${node_pods}"
        exit 0
      fi
      if [[ "${args[1]:-}" =~ ^(csr|csrs|certificatesigningrequests)$ ]]; then
        # state kubectl/csrs: one "<name> <username> <signerName> <condition>" line per request
        # (condition empty while pending), served as CertificateSigningRequest objects.
        if state_has kubectl/csrs-at && ! past "$(state_get kubectl/csrs-at)"; then
          echo '{"kind": "List", "items": []}' | _render_list "${all[@]}"
          exit 0
        fi
        python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" csr list |
          _render_list "${all[@]}"
        exit 0
      fi
      if [[ "${args[1]:-}" =~ ^(secret|secrets)$ ]]; then
        local type=""
        for ((i = 0; i < ${#all[@]}; i++)); do
          [[ "${all[i]}" == --field-selector ]] && type="${all[i + 1]#type=}"
          [[ "${all[i]}" == --field-selector=type=* ]] && type="${all[i]#--field-selector=type=}"
        done
        if [[ -n "${args[2]:-}" ]]; then
          _get_object "kubectl/secrets/${namespace}/${args[2]}.json" "secrets \"${args[2]}\"" \
            "${all[@]}"
        fi
        python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" secret list \
          "${namespace}" "${type}" | _render_list "${all[@]}"
        exit 0
      fi
      if [[ "${args[1]:-}" =~ ^(daemonset|daemonsets|ds)$ ]]; then
        local ds="kubectl/daemonsets/${namespace}/${args[2]}.json" output=""
        for ((i = 0; i < ${#all[@]}; i++)); do
          [[ "${all[i]}" == -o ]] && output="${all[i + 1]}"
        done
        if ! state_has "${ds}"; then
          [[ " ${all[*]} " == *" --ignore-not-found "* ]] && exit 0
          echo "Error from server (NotFound): daemonsets.apps \"${args[2]}\" not found" >&2
          exit 1
        fi
        python3 "$(dirname "$0")/_kubectl_jsonpath.py" "${output#jsonpath=}" <"${STUB_STATE}/${ds}"
        exit 0
      fi
      ;;
    create | replace)
      [[ -f "${file}" ]] || { echo "error: the path \"${file}\" does not exist" >&2 && exit 1; }
      if state_has kubectl/leases-forbidden; then
        echo "Error from server (Forbidden): error when creating \"${file}\": leases.coordination.k8s.io is forbidden: User \"kubernetes-admin\" cannot ${args[0]} resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"${namespace}\"" >&2
        exit 1
      fi
      python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" lease "${args[0]}" "${file}"
      exit $?
      ;;
    label | taint | annotate)
      # `kubectl <verb> node <name> [--overwrite] <change>...` (_kubectl_objects.py).
      if should_fail "kubectl.fail.${args[0]}"; then
        echo "Error from server (InternalServerError): etcdserver: request timed out" >&2
        exit 1
      fi
      local overwrite=no
      [[ " ${all[*]} " == *" --overwrite "* || " ${all[*]} " == *" --overwrite=true "* ]] && overwrite=yes
      python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" node "${args[0]}" "${args[2]}" \
        "${overwrite}" "${args[@]:3}"
      exit $?
      ;;
    cordon | uncordon)
      python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" node "${args[0]}" "${args[1]}"
      exit $?
      ;;
    apply)
      [[ -f "${file}" ]] || { echo "error: the path \"${file}\" does not exist" >&2 && exit 1; }
      mkdir -p "${STUB_STATE}/kubectl/applied"
      cp "${file}" "${STUB_STATE}/kubectl/applied/$(basename "${file}")"
      local line
      line="$(_ds_json "${file}")"
      if [[ -n "${line}" ]]; then
        state_set "kubectl/daemonsets/${line%% *}.json" "${line#* }"
        echo "daemonset.apps/${line%% *} configured"
      fi
      exit 0
      ;;
    rollout)
      if ! _takes kubectl/rollout-seconds "${timeout}" || should_fail kubectl.fail.rollout; then
        echo "error: timed out waiting for the condition" >&2
        exit 1
      fi
      echo "daemon set \"${args[2]#*/}\" successfully rolled out"
      exit 0
      ;;
    wait)
      local node="${args[1]#node/}" status=""
      _takes kubectl/wait-seconds "${timeout}" || {
        echo "error: timed out waiting for the condition on nodes/${node}" >&2
        exit 1
      }
      if state_has "kubectl/nodes/${node}.json"; then
        status="$(python3 "$(dirname "$0")/_kubectl_jsonpath.py" \
          '{.status.conditions[?(@.type=="Ready")].status}' <"${STUB_STATE}/kubectl/nodes/${node}.json")"
      fi
      if [[ "${condition}" == condition=Ready && "${status}" == True ]]; then
        echo "node/${node} condition met"
        exit 0
      fi
      echo "error: timed out waiting for the condition on nodes/${node}" >&2
      exit 1
      ;;
    certificate)
      local csrs="${STUB_STATE}/kubectl/csrs" line found=""
      [[ "${args[1]:-}" == approve && -f "${csrs}" ]] || exit 1
      while read -r line; do
        if [[ "${line%% *}" == "${args[2]}" ]]; then
          found=yes
          line="${line% *} Approved"
        fi
        printf '%s\n' "${line}"
      done <"${csrs}" >"${csrs}.new"
      mv "${csrs}.new" "${csrs}"
      [[ -n "${found}" ]] || { echo "Error from server (NotFound): certificatesigningrequests \"${args[2]}\" not found" >&2 && exit 1; }
      echo "certificatesigningrequest.certificates.k8s.io/${args[2]} approved"
      exit 0
      ;;
    drain)
      if should_fail kubectl.fail.drain; then
        echo "error: unable to drain node \"${args[1]}\" due to error: Cannot evict pod as it would violate the pod's disruption budget." >&2
        exit 1
      fi
      state_set "kubectl/drained/${args[1]}" yes
      echo "node/${args[1]} drained"
      exit 0
      ;;
    delete)
      if [[ "${args[1]:-}" =~ ^(secret|secrets)$ ]]; then
        local ignore=no
        [[ " ${all[*]} " == *" --ignore-not-found "* ]] && ignore=yes
        python3 "$(dirname "$0")/_kubectl_objects.py" "${STUB_STATE}" secret delete \
          "${namespace}" "${args[2]}" "${ignore}"
        exit $?
      fi
      if [[ "${args[1]:-}" =~ ^(node|nodes|no)$ ]]; then
        rm -f "${STUB_STATE}/kubectl/nodes/${args[2]}.json"
        echo "node \"${args[2]}\" deleted"
        exit 0
      fi
      ;;
  esac
}
