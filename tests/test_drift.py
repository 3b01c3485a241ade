"""The scheduled drift check (.github/workflows/drift.yml) leaves out only what changes by
design (tools/drift.py): one-shot image builders and, in the state of a stack deployed before
decision 057, join-token Secrets past their expiry, read from the state a real `pulumi stack
export` holds. Checked on the registered graph of a stack with a baked pool, as its export would
list it. What the cluster owns, and that the program registers none of it:
tests/test_join_token.py."""

from __future__ import annotations

import datetime
import json

from tools import drift
from tools.harness.graph import unwrap
from tools.harness.stacks import PROGRAM_CLOCK, run_program, stack_file

# A join token of a release before decision 057, as its state holds it: a Secret of the
# Kubernetes provider, its data secret, its expiry in the clear.
EARLIER_TOKEN = {
    "urn": "urn:pulumi:dev::gpu-cluster::gpu-cluster:index:GpuNodePool$gpu-cluster:index:GpuNode$"
    "kubernetes:core/v1:Secret::dev-gpu-a10g-0-join-token",
    "type": drift.SECRET,
    "inputs": {
        "type": drift.TOKEN_TYPE,
        "metadata": {
            "name": "bootstrap-token-abcdef",
            "namespace": "kube-system",
            "annotations": {drift.EXPIRES_ANNOTATION: "2026-01-01T02:00:00Z"},
        },
        "stringData": {
            "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
            "ciphertext": "v1:encrypted",
        },
    },
    "outputs": {},
}


def _export(graph) -> dict:
    """The graph as `pulumi stack export` shows a stack's resources (deployment v3)."""
    resources = [
        {"urn": r.urn, "type": r.type, "inputs": unwrap(r.inputs), "outputs": {}} for r in graph
    ]
    return {"version": 3, "deployment": {"resources": resources}}


def test_builders_and_earlier_expired_tokens_are_left_out_and_nothing_else(tmp_path, capsys):
    pool = {**stack_file("dev")["gpu-cluster:nodePools"][0], "image": "baked"}
    export = _export(run_program("dev", config={"nodePools": [pool]}))
    resources = [*export["deployment"]["resources"], EARLIER_TOKEN]
    builders = [r["urn"] for r in resources if r["urn"].endswith("-builder")]
    assert builders and all("aws:ec2/instance:Instance" in urn for urn in builders), builders
    expires = datetime.datetime(2026, 1, 1, 2, tzinfo=datetime.UTC)

    before = drift.excluded(resources, now=expires - datetime.timedelta(seconds=1))
    assert before == builders, before
    after = drift.excluded(resources, now=expires)
    assert after == [*builders, EARLIER_TOKEN["urn"]], after
    # Nothing else, however late: not the control plane, not a node, not a token record.
    much_later = drift.excluded(resources, now=PROGRAM_CLOCK + datetime.timedelta(days=3650))
    assert much_later == after, much_later

    export["deployment"]["resources"] = resources
    state = tmp_path / "state.json"
    state.write_text(json.dumps(export))
    assert drift.main([str(state)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed and all(line.startswith("--exclude=urn:pulumi:") for line in printed), printed


def test_a_token_without_a_known_expiry_is_checked_like_the_rest():
    secret = json.loads(json.dumps(EARLIER_TOKEN))
    secret["inputs"]["metadata"]["annotations"] = {}
    assert drift.excluded([secret]) == []
    secret["inputs"]["metadata"]["annotations"][drift.EXPIRES_ANNOTATION] = "soon"
    assert drift.excluded([secret]) == []
