"""The scheduled drift check (.github/workflows/drift.yml) leaves out only what changes by
design: join-token Secrets past their expiry and one-shot image builders (tools/drift.py), read
from the state a real `pulumi stack export` holds. Checked on the registered graph of a stack
with a baked pool, as its export would list it."""

from __future__ import annotations

import datetime
import json

from components.kube.bootstrap_token import EXPIRES_ANNOTATION
from tools import drift
from tools.harness.graph import unwrap
from tools.harness.stacks import run_program, stack_file


def _export(graph) -> dict:
    """The graph as `pulumi stack export` shows a stack's resources (deployment v3)."""
    resources = [
        {"urn": r.urn, "type": r.type, "inputs": unwrap(r.inputs), "outputs": {}} for r in graph
    ]
    return {"version": 3, "deployment": {"resources": resources}}


def _graph():
    pool = {**stack_file("dev")["gpu-cluster:nodePools"][0], "image": "baked"}
    return run_program("dev", config={"nodePools": [pool]})


def test_expired_tokens_and_image_builders_are_left_out_and_nothing_else(tmp_path, capsys):
    graph = _graph()
    export = _export(graph)
    tokens = [
        r
        for r in export["deployment"]["resources"]
        if r["type"] == drift.SECRET and r["inputs"].get("type") == drift.TOKEN_TYPE
    ]
    assert tokens, "dev has a join-token Secret per node"
    expiry = tokens[0]["inputs"]["metadata"]["annotations"][EXPIRES_ANNOTATION]
    expires = datetime.datetime.strptime(expiry, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    resources = export["deployment"]["resources"]
    builders = [r["urn"] for r in resources if r["urn"].endswith("-builder")]
    assert builders and all(r.endswith("-builder") for r in builders), builders

    before = drift.excluded(resources, now=expires - datetime.timedelta(seconds=1))
    assert before == [b for b in builders if "aws:ec2/instance:Instance" in b], before
    after = drift.excluded(resources, now=expires)
    assert set(after) == set(before) | {t["urn"] for t in tokens}, after
    # Nothing else: not the control plane, not a node, not a Secret of another type.
    others = {r["urn"] for r in resources} - set(after)
    assert any("control-plane" in u for u in others), "the control plane is checked"

    state = tmp_path / "state.json"
    state.write_text(json.dumps(export))
    assert drift.main([str(state)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert all(line.startswith("--exclude=urn:pulumi:") for line in printed), printed


def test_a_token_without_a_known_expiry_is_checked_like_the_rest():
    secret = {
        "urn": "urn:pulumi:dev::gpu-cluster::kubernetes:core/v1:Secret::x-join-token",
        "type": drift.SECRET,
        "inputs": {"type": drift.TOKEN_TYPE, "metadata": {"annotations": {}}},
    }
    assert drift.excluded([secret]) == []
    secret["inputs"]["metadata"]["annotations"][EXPIRES_ANNOTATION] = "soon"
    assert drift.excluded([secret]) == []
