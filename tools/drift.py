"""What the scheduled drift check leaves out: `python -m tools.drift state.json` reads a stack's
`pulumi stack export` and prints one `--exclude=<URN>` argument per line for what changes by
design, so `pulumi preview --refresh --expect-no-changes` fails only on real drift:
- a node's join-token Secret past its expiry (`gpu-cluster.io/expires`): kube-controller-
  manager's token cleaner deletes it (docs/decisions/025-a-join-token-lives-two-hours.md);
- a one-shot image builder (`instanceInitiatedShutdownBehavior: terminate`): it powers itself
  off, and so terminates, once its image is made.

Why: docs/decisions/040-drift-is-looked-for-daily.md
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SECRET = "kubernetes:core/v1:Secret"
INSTANCE = "aws:ec2/instance:Instance"
TOKEN_TYPE = "bootstrap.kubernetes.io/token"
EXPIRES_ANNOTATION = "gpu-cluster.io/expires"


def _expired(resource: Mapping[str, Any], now: datetime.datetime) -> bool:
    props = {**resource.get("inputs", {}), **resource.get("outputs", {})}
    if props.get("type") != TOKEN_TYPE:
        return False
    annotations = (props.get("metadata") or {}).get("annotations") or {}
    expires = annotations.get(EXPIRES_ANNOTATION)
    if not isinstance(expires, str):
        return False  # no known expiry: checked like everything else
    try:
        when = datetime.datetime.strptime(expires, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return False
    return when.replace(tzinfo=datetime.UTC) <= now


def _one_shot(resource: Mapping[str, Any]) -> bool:
    inputs = resource.get("inputs", {})
    return inputs.get("instanceInitiatedShutdownBehavior") == "terminate"


def excluded(
    resources: Iterable[Mapping[str, Any]], now: datetime.datetime | None = None
) -> list[str]:
    """The URNs the drift check leaves out, in state order."""
    now = now or datetime.datetime.now(datetime.UTC)
    found = []
    for resource in resources:
        kind = resource.get("type")
        if (kind == SECRET and _expired(resource, now)) or (
            kind == INSTANCE and _one_shot(resource)
        ):
            found.append(str(resource["urn"]))
    return found


def state_resources(export: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The resources of a `pulumi stack export` (deployment version 3)."""
    return list((export.get("deployment") or {}).get("resources") or [])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(
            "usage: python -m tools.drift STATE.json (from `pulumi stack export`)", file=sys.stderr
        )
        return 2
    export = json.loads(Path(args[0]).read_text())
    for urn in excluded(state_resources(export)):
        print(f"--exclude={urn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
