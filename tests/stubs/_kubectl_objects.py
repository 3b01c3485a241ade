"""Objects of the kubectl stub's cluster API that need atomic writes: Leases and cordons.

Stands for kubectl 1.35 and kube-apiserver 1.35 on these objects: optimistic concurrency as
k8s.io/apiserver pkg/registry/generic/registry/store.go `Update` applies it (a stale
resourceVersion is a 409 Conflict: 'Operation cannot be fulfilled on leases.coordination.k8s.io
"<name>": the object has been modified; please apply your changes to the latest version and try
again'), AlreadyExists from `Create`, and kubectl's label, taint and annotate commands as cited
below.

Every write holds an exclusive lock on the state directory, as the API server serializes writes
to one object, so concurrent stub processes (two runs on one control plane) see one order.

  lease create|replace <manifest>   as `kubectl create|replace -f`: create fails with
      AlreadyExists when the Lease exists; replace fails with NotFound when it does not and with
      Conflict when the manifest's metadata.resourceVersion is not the stored one (a manifest
      without one replaces unconditionally, as the API server does). Each write gets a new
      resourceVersion and appends "<name>\\t<holder>" to kubectl/lease-history.
      state kubectl/lease-race/<name>: before this write, another client takes the Lease for the
      holder named in the file (the file is then removed), so the write meets a changed Lease.
  cordon|uncordon <node>   sets or clears spec.unschedulable of kubectl/nodes/<node>.json,
      appends "<verb> <node>" to kubectl/cordon-history and keeps in kubectl/cordoned-max the
      most nodes ever cordoned at once.
  label|taint|annotate <node> <overwrite: yes|no> <change>...   `kubectl label|taint|annotate
      node <node> [--overwrite] <change>...` on kubectl/nodes/<node>.json, parsed, refused and
      printed as kubectl does (kubectl `pkg/cmd/label/label.go` parseLabels, labelFunc;
      `pkg/cmd/taint/taint.go` Validate, updateTaints and `pkg/cmd/taint/utils.go` parseTaint,
      ReorganizeTaints, deleteTaints; `pkg/cmd/annotate/annotate.go`):
      label    k=v sets, k- removes (an absent one: `label "k" not found.`, no error); a key both
               set and removed, or set over an existing value without --overwrite, is an error.
      taint    k=v:Effect or k:Effect adds (with --overwrite replacing the taint of the same key
               and effect), k=v:Effect- or k:Effect- removes the taint of that key and effect
               (the value is not compared), k- every taint of the key. Removing a taint the
               Node does not have fails (`taint "k:Effect" not found`), nothing is written; so
               does removing a key and effect the same command sets.
      annotate k=v sets, k- removes.
      Nothing is written when the command fails; each write gets a new resourceVersion.
  secret list <namespace> <type>   the Secrets of kubectl/secrets/<namespace>/*.json (of that
      type, `--field-selector type=<type>`; all when empty) as a List, in name order.
  secret delete <namespace> <name> yes|no   removes kubectl/secrets/<namespace>/<name>.json and
      appends "<namespace>/<name>" to kubectl/deleted-secrets; an absent one is NotFound (exit
      1) unless --ignore-not-found (yes).
  csr list   the requests of state kubectl/csrs ("<name> <username> <signerName> <condition>"
      lines, condition empty while pending) as a List of CertificateSigningRequests, with
      spec.usages and spec.request from kubectl/csr-specs/<name>.json where given.
Usage: python3 _kubectl_objects.py <state-dir> lease create|replace <file>
       | node cordon|uncordon <node> | node label|taint|annotate <node> yes|no <change>...
       | secret list <namespace> <type> | secret delete <namespace> <name> yes|no | csr list
"""

import fcntl
import json
import re
import sys
from pathlib import Path


def _next_version(state: Path) -> str:
    counter = state / "kubectl" / "resource-version"
    version = int(counter.read_text()) + 1 if counter.exists() else 100
    counter.write_text(str(version))
    return str(version)


def _write_lease(state: Path, path: Path, lease: dict) -> None:
    lease["metadata"]["resourceVersion"] = _next_version(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(lease))
    holder = lease.get("spec", {}).get("holderIdentity", "")
    with (state / "kubectl" / "lease-history").open("a") as history:
        history.write(f"{lease['metadata']['name']}\t{holder}\n")


def lease(state: Path, verb: str, manifest: str) -> int:
    wanted = json.loads(Path(manifest).read_text())
    name = wanted["metadata"]["name"]
    namespace = wanted["metadata"].get("namespace", "default")
    path = state / "kubectl" / "leases" / namespace / f"{name}.json"
    race = state / "kubectl" / "lease-race" / name
    if race.exists():
        other = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                **wanted.get("spec", {}),
                "holderIdentity": race.read_text().strip(),
                "leaseDurationSeconds": 3600,
            },
        }
        race.unlink()
        _write_lease(state, path, other)
    resource = f'leases.coordination.k8s.io "{name}"'
    if verb == "create":
        if path.exists():
            print(f"Error from server (AlreadyExists): {resource} already exists", file=sys.stderr)
            return 1
        wanted["metadata"].pop("resourceVersion", None)
    else:
        if not path.exists():
            print(f"Error from server (NotFound): {resource} not found", file=sys.stderr)
            return 1
        stored = json.loads(path.read_text())["metadata"]["resourceVersion"]
        given = wanted["metadata"].get("resourceVersion")
        if given is not None and given != stored:
            print(
                f"Error from server (Conflict): Operation cannot be fulfilled on {resource}: the "
                "object has been modified; please apply your changes to the latest version and "
                "try again",
                file=sys.stderr,
            )
            return 1
    _write_lease(state, path, wanted)
    print(f"lease.coordination.k8s.io/{name} {'created' if verb == 'create' else 'replaced'}")
    return 0


def cordon(state: Path, verb: str, node: str) -> int:
    path = state / "kubectl" / "nodes" / f"{node}.json"
    if not path.exists():
        print(f'Error from server (NotFound): nodes "{node}" not found', file=sys.stderr)
        return 1
    obj = json.loads(path.read_text())
    spec = obj.setdefault("spec", {})
    if verb == "cordon":
        spec["unschedulable"] = True
    else:
        spec.pop("unschedulable", None)
    path.write_text(json.dumps(obj))
    with (state / "kubectl" / "cordon-history").open("a") as history:
        history.write(f"{verb} {node}\n")
    cordoned = sum(
        1
        for p in (state / "kubectl" / "nodes").glob("*.json")
        if json.loads(p.read_text()).get("spec", {}).get("unschedulable")
    )
    most = state / "kubectl" / "cordoned-max"
    if cordoned > (int(most.read_text()) if most.exists() else 0):
        most.write_text(str(cordoned))
    print(f"node/{node} {'cordoned' if verb == 'cordon' else 'uncordoned'}")
    return 0


# apimachinery `pkg/util/validation`: IsValidLabelValue, IsQualifiedName (the name part).
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class KubectlError(Exception):
    """A refusal kubectl prints as `error: <message>` (exit 1), before anything is written."""


def _valid_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def _valid_key(key: str) -> bool:
    return len(key.rpartition("/")[2]) <= 63 and _QUALIFIED.fullmatch(key) is not None


def _parse_taint(spec: str) -> dict:
    """kubectl parseTaint: key=value:effect, key:effect or key."""
    parts = spec.split(":")
    value = ""
    effect = ""
    if len(parts) == 1:
        key = parts[0]
    elif len(parts) == 2:
        effect = parts[1]
        if effect not in _EFFECTS:
            raise KubectlError(f"invalid taint effect: {effect}, unsupported taint effect")
        kv = parts[0].split("=")
        if len(kv) > 2:
            raise KubectlError(f"invalid taint spec: {spec}")
        key = kv[0]
        if len(kv) == 2:
            value = kv[1]
            if not _valid_value(value):
                raise KubectlError(f"invalid taint spec: {spec}")
    else:
        raise KubectlError(f"invalid taint spec: {spec}")
    if not _valid_key(key):
        raise KubectlError(f"invalid taint spec: {spec}")
    return {"key": key, "value": value, "effect": effect}


def _taint_string(taint: dict) -> str:
    """corev1 Taint.ToString."""
    text = taint["key"]
    if taint.get("value"):
        text += f"={taint['value']}"
    if taint.get("effect"):
        text += f":{taint['effect']}"
    return text


def _node_taints(changes: list[str], taints: list[dict], overwrite: bool, node: str):
    """(new taints, operation) as kubectl taint computes them."""
    add, remove = [], []
    for spec in changes:
        if spec.endswith("-"):
            found = _parse_taint(spec[:-1])
            remove.append({"key": found["key"], "effect": found["effect"]})
            continue
        taint = _parse_taint(spec)
        if not taint["effect"]:
            raise KubectlError(f"invalid taint spec: {spec}")
        if any(t["key"] == taint["key"] and t["effect"] == taint["effect"] for t in add):
            raise KubectlError(f"duplicated taints with the same key and effect: {taint}")
        add.append(taint)
    conflicts = [
        f'{{"{r["key"]}":"{r["effect"]}"}}'
        for a in add
        for r in remove
        if a["key"] == r["key"] and (not r["effect"] or a["effect"] == r["effect"])
    ]
    if conflicts:
        raise KubectlError(
            "can not both modify and remove the following taint(s) in the same command: "
            + ", ".join(conflicts)
        )

    def same(a: dict, b: dict) -> bool:
        return a["key"] == b["key"] and a["effect"] == b["effect"]

    if not overwrite:
        existing = [a["key"] for a in add for t in taints if same(a, t)]
        if existing:
            raise KubectlError(
                f"node {node} already has {','.join(existing)} taint(s) with same effect(s) and "
                "--overwrite is false"
            )
    result = [{k: v for k, v in a.items() if v} for a in add]
    result += [old for old in taints if not any(same(old, a) for a in add)]
    added = len(taints) != len(result)
    deleted = False
    missing = []
    for r in remove:
        kept = [
            t for t in result if not (t["key"] == r["key"] and r["effect"] in ("", t["effect"]))
        ]
        deleted = len(kept) != len(result)
        if not deleted:
            missing.append(f'taint "{_taint_string(r)}" not found')
        result = kept
    if missing:
        raise KubectlError(", ".join(missing) if len(missing) == 1 else f"[{', '.join(missing)}]")
    if (added and deleted) or overwrite:
        return result, "modified"
    return result, "tainted" if added else "untainted"


def _pairs(changes: list[str], what: str) -> tuple[dict, list[str]]:
    """kubectl's key=value / key- arguments of label and annotate."""
    wanted, remove = {}, []
    for spec in changes:
        if "=" in spec:
            key, _, value = spec.partition("=")
            if what == "label":
                if "=" in value:
                    raise KubectlError(f"invalid label spec: {spec}")
                if not _valid_value(value):
                    raise KubectlError(
                        f"invalid label value: {spec!r}: a valid label must be "
                        "an empty string or consist of alphanumeric characters, "
                        "'-', '_' or '.'"
                    )
            wanted[key] = value
        elif spec.endswith("-"):
            remove.append(spec[:-1])
        else:
            raise KubectlError(f"unknown {what} spec: {spec}")
    if any(key in wanted for key in remove):
        raise KubectlError(
            "can not both modify and remove a label in the same command"
            if what == "label"
            else "can not both modify and remove an annotation in the same command"
        )
    return wanted, remove


def node_change(state: Path, verb: str, node: str, overwrite: bool, changes: list[str]) -> int:
    """`kubectl label|taint|annotate node <node> [--overwrite] <change>...`."""
    path = state / "kubectl" / "nodes" / f"{node}.json"
    if not path.exists():
        print(f'Error from server (NotFound): nodes "{node}" not found', file=sys.stderr)
        return 1
    obj = json.loads(path.read_text())
    before = json.dumps(obj, sort_keys=True)
    metadata = obj.setdefault("metadata", {})
    try:
        if verb == "taint":
            taints, message = _node_taints(
                changes, obj.get("spec", {}).get("taints", []), overwrite, node
            )
            if taints:
                obj.setdefault("spec", {})["taints"] = taints
            else:
                obj.get("spec", {}).pop("taints", None)
        else:
            field = "labels" if verb == "label" else "annotations"
            current = metadata.setdefault(field, {})
            wanted, remove = _pairs(changes, verb)
            taken = [f"'{k}' already has a value ({current[k]})" for k in wanted if k in current]
            if taken and not overwrite:
                raise KubectlError(
                    f"{taken[0]}, and --overwrite is false"
                    if verb == "label"
                    else "--overwrite is false but found the following declared annotation(s): "
                    + "; ".join(taken)
                )
            if verb == "label":
                for key in remove:
                    if key not in current:
                        print(f'label "{key}" not found.')
            current.update(wanted)
            for key in remove:
                current.pop(key, None)
            changed = json.dumps(obj, sort_keys=True) != before
            message = {"label": "labeled", "annotate": "annotated"}[verb]
            if verb == "label" and not changed:
                message = "not labeled"
    except KubectlError as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    if json.dumps(obj, sort_keys=True) != before:
        metadata["resourceVersion"] = _next_version(state)
        path.write_text(json.dumps(obj))
    print(f"node/{node} {message}")
    return 0


def secret_list(state: Path, namespace: str, type_: str) -> int:
    directory = state / "kubectl" / "secrets" / namespace
    items = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    items = [i for i in items if not type_ or i.get("type") == type_]
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return 0


def secret_delete(state: Path, namespace: str, name: str, ignore_not_found: bool) -> int:
    path = state / "kubectl" / "secrets" / namespace / f"{name}.json"
    if not path.exists():
        if ignore_not_found:
            return 0
        print(f'Error from server (NotFound): secrets "{name}" not found', file=sys.stderr)
        return 1
    path.unlink()
    with (state / "kubectl" / "deleted-secrets").open("a") as deleted:
        deleted.write(f"{namespace}/{name}\n")
    print(f'secret "{name}" deleted')
    return 0


def csr_list(state: Path) -> int:
    path = state / "kubectl" / "csrs"
    items = []
    for line in path.read_text().splitlines() if path.exists() else []:
        name, user, signer, condition = ([*line.split(" "), "", "", ""])[:4]
        spec = {"username": user, "signerName": signer}
        extra = state / "kubectl" / "csr-specs" / f"{name}.json"
        if extra.exists():
            spec.update(json.loads(extra.read_text()))  # usages, request
        items.append(
            {
                "metadata": {"name": name},
                "spec": spec,
                "status": {"conditions": [{"type": condition}]} if condition else {},
            }
        )
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return 0


def main() -> int:
    state, kind, verb = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    target = sys.argv[4] if len(sys.argv) > 4 else ""
    (state / "kubectl").mkdir(parents=True, exist_ok=True)
    with (state / "kubectl" / "api.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kind == "csr":
            return csr_list(state)
        if kind == "secret" and verb == "list":
            return secret_list(state, target, sys.argv[5])
        if kind == "secret":
            return secret_delete(state, target, sys.argv[5], sys.argv[6] == "yes")
        if kind == "lease":
            return lease(state, verb, target)
        if verb in ("label", "taint", "annotate"):
            return node_change(state, verb, target, sys.argv[5] == "yes", sys.argv[6:])
        return cordon(state, verb, target)


sys.exit(main())
