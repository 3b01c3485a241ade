"""Resource hooks on the real engine (pulumi v3.274.0, Python SDK 3.272.0): when a before_delete
hook of a resource runs, with what arguments, and what a later run must do for it to run.

Engine sources (pkg/v3): resource/deploy/step.go `DeleteStep.Apply` runs the hooks named in the
OLD state (`s.old.ResourceHooks[BeforeDelete]`) with the old inputs and outputs and nothing new;
resource/deploy/deployment.go `RunHooks` looks each name up among the hooks the program
registered in THIS run and fails the step with `hook "<name>" was not registered` otherwise,
and skips a hook in a preview unless it was registered with on_dry_run; engine/destroy.go
`newDestroySource` refuses a destroy without --run-program when any resource has delete hooks.
SDK: sdk/python/lib/pulumi/resource_hooks.py (ResourceHookArgs' table: before_delete gets
old_inputs and old_outputs; ResourceHookBinding: delete hooks must be named ResourceHooks).
docs/decisions/056-delete-hooks-on-the-real-engine.md draws the consequences.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import engine
from tools.harness.engine import EngineStack

pytestmark = pytest.mark.engine

NAMESPACE = "engine-hooks"
PROGRAM = f"""
import json
import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
record = config.require("record")


def drain(args):
    with open(record, "a") as log:
        log.write(json.dumps({{
            "urn": args.urn, "id": args.id, "name": args.name, "type": args.type,
            "old_inputs": args.old_inputs, "old_outputs": args.old_outputs,
            "new_inputs": args.new_inputs, "new_outputs": args.new_outputs,
        }}, default=repr) + "\\n")


hook = pulumi.ResourceHook("drain", drain) if config.get_bool("registerHook") else None
provider = k8s.Provider("cluster", kubeconfig=config.require_secret("kubeconfig"))
namespace = k8s.core.v1.Namespace(
    "ns", metadata={{"name": "{NAMESPACE}"}}, opts=pulumi.ResourceOptions(provider=provider)
)
if config.get_bool("keepNode"):
    k8s.core.v1.ConfigMap(
        "node",
        metadata={{"name": "node-a", "namespace": namespace.metadata.name}},
        data={{"instance": "i-0abc"}},
        opts=pulumi.ResourceOptions(
            provider=provider, hooks=pulumi.ResourceHookBinding(before_delete=[hook])
        ),
    )
"""
NODE_CONFIGMAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/node-a"


@pytest.fixture
def stack(tmp_path, engine_binaries, kube_cluster):
    program = engine.project(tmp_path / "program", "engine-hooks", PROGRAM)
    stack = EngineStack.create(tmp_path / "work", program, "test", engine_binaries)
    stack.set_config(
        {
            "engine-hooks:record": str(tmp_path / "hook-calls.jsonl"),
            "engine-hooks:keepNode": True,
            "engine-hooks:registerHook": True,
        },
        secrets={"engine-hooks:kubeconfig": kube_cluster.kubeconfig_text()},
    )
    yield stack
    stack.set_config({"engine-hooks:registerHook": True})
    stack.destroy(run_program=True)


def _calls(stack: EngineStack) -> list[dict]:
    path = stack.work_dir.parent / "hook-calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _hooks_in_state(stack: EngineStack) -> dict[str, dict]:
    return {
        urn: r.get("resourceHooks")
        for urn, r in stack.resources().items()
        if urn.endswith("::node")
    }


def test_the_state_keeps_the_hook_names_of_a_resource(stack):
    assert stack.up().ok
    assert list(_hooks_in_state(stack).values()) == [{"BeforeDelete": ["drain"]}]


def test_removing_the_resource_runs_its_hook_with_the_old_inputs_and_outputs(stack, kube_cluster):
    assert stack.up().ok
    stack.set_config({"engine-hooks:keepNode": False})

    preview = stack.preview()
    assert preview.ok, preview.output()
    assert _calls(stack) == [], "a preview ran the delete hook (it has no on_dry_run)"

    removed = stack.up()
    assert removed.ok, removed.output()
    [call] = _calls(stack)
    assert call["name"] == "node" and call["type"] == "kubernetes:core/v1:ConfigMap"
    assert call["id"] == f"{NAMESPACE}/node-a"
    assert call["old_inputs"]["data"] == {"instance": "i-0abc"}
    assert call["old_outputs"]["data"] == {"instance": "i-0abc"}
    assert call["new_inputs"] is None and call["new_outputs"] is None
    assert not kube_cluster.api().exists(NODE_CONFIGMAP)


def test_a_run_that_no_longer_registers_the_hook_cannot_delete_the_resource(stack, kube_cluster):
    assert stack.up().ok
    stack.set_config({"engine-hooks:keepNode": False, "engine-hooks:registerHook": False})

    removed = stack.up()
    assert not removed.ok
    assert 'hook "drain" was not registered' in removed.output()
    assert _calls(stack) == []
    assert kube_cluster.api().exists(NODE_CONFIGMAP), "deleted without its hook"
    assert len(_hooks_in_state(stack)) == 1, "the resource left the state without its hook"


def test_destroy_needs_the_program_to_run_delete_hooks(stack, kube_cluster):
    assert stack.up().ok

    refused = stack.destroy()
    assert not refused.ok
    assert "You must run with the `--run-program` flag to use delete hooks" in refused.output()
    assert kube_cluster.api().exists(NODE_CONFIGMAP)

    destroyed = stack.destroy(run_program=True)
    assert destroyed.ok, destroyed.output()
    assert [call["name"] for call in _calls(stack)] == ["node"]
    assert not kube_cluster.api().exists(NODE_CONFIGMAP)
