"""Objects of the kubectl stub's cluster API that need atomic writes: Leases and cordons.

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
  annotate <node> key=value|key-   sets or removes an annotation of kubectl/nodes/<node>.json.
Usage: python3 _kubectl_objects.py <state-dir> lease create|replace <file>
       | node cordon|uncordon <node> | node annotate <node> <change>
"""

import fcntl
import json
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


def annotate(state: Path, node: str, change: str) -> int:
    """`kubectl annotate node <node> key=value --overwrite` or `key-` (remove)."""
    path = state / "kubectl" / "nodes" / f"{node}.json"
    if not path.exists():
        print(f'Error from server (NotFound): nodes "{node}" not found', file=sys.stderr)
        return 1
    obj = json.loads(path.read_text())
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    if change.endswith("-"):
        annotations.pop(change[:-1], None)
    else:
        key, _, value = change.partition("=")
        annotations[key] = value
    path.write_text(json.dumps(obj))
    print(f"node/{node} annotated")
    return 0


def main() -> int:
    state, kind, verb, target = Path(sys.argv[1]), *sys.argv[2:5]
    (state / "kubectl").mkdir(parents=True, exist_ok=True)
    with (state / "kubectl" / "api.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kind == "lease":
            return lease(state, verb, target)
        if verb == "annotate":
            return annotate(state, target, sys.argv[5])
        return cordon(state, verb, target)


sys.exit(main())
