"""The real engine and pulumi-kubernetes' provider against a real API server: a small program's
life (create, a second `up` that changes nothing, a refresh after an out-of-band delete, a
recreation, a destroy), asserted on the API server and on the engine's checkpoint."""

from __future__ import annotations

import pytest

from tests.helpers import engine
from tools.harness.engine import EngineStack

pytestmark = pytest.mark.engine

NAMESPACE = "engine-kube"
CONFIGMAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/settings"
PROGRAM = f"""
import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
provider = k8s.Provider("cluster", kubeconfig=config.require_secret("kubeconfig"))
opts = pulumi.ResourceOptions(provider=provider)
namespace = k8s.core.v1.Namespace("ns", metadata={{"name": "{NAMESPACE}"}}, opts=opts)
settings = k8s.core.v1.ConfigMap(
    "settings",
    metadata={{"name": "settings", "namespace": namespace.metadata.name}},
    data={{"mode": config.require("mode")}},
    opts=opts,
)
pulumi.export("configmap", settings.metadata.name)
"""
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"


@pytest.fixture
def stack(tmp_path, engine_binaries, kube_cluster):
    program = engine.project(tmp_path / "program", "engine-kube", PROGRAM)
    stack = EngineStack.create(tmp_path / "work", program, "test", engine_binaries)
    stack.set_config(
        {"engine-kube:mode": "real"},
        secrets={"engine-kube:kubeconfig": kube_cluster.kubeconfig_text()},
    )
    yield stack
    stack.destroy()


def _configmaps(stack: EngineStack) -> list[dict]:
    return [r for r in stack.resources().values() if r["type"] == CONFIGMAP_TYPE]


def test_up_creates_then_a_second_up_changes_nothing(stack, kube_cluster):
    api = kube_cluster.api()
    first = stack.up()
    assert first.ok, first.output()
    assert api.get(CONFIGMAP)["data"] == {"mode": "real"}
    assert (
        "create",
        next(u for _, u in first.steps() if u.endswith("::settings")),
    ) in first.steps()

    # `--expect-no-changes`: the CLI fails the update when any step would change something.
    again = stack.up(expect_no_changes=True)
    assert again.ok, again.output()
    assert {op for op, _ in again.steps()} == {"same"}

    stack.set_config({"engine-kube:mode": "changed"})
    changed = stack.up(expect_no_changes=True)
    assert not changed.ok, "a changed input must fail an up that expects no changes"
    assert api.get(CONFIGMAP)["data"] == {"mode": "changed"}, (
        "--expect-no-changes fails after the update ran, it is no preview"
    )


def test_refresh_forgets_an_object_deleted_out_of_band_and_up_recreates_it(stack, kube_cluster):
    """pulumi-kubernetes' Read answers a 404 with an empty response (provider/pkg/provider/
    provider.go, kubeProvider.Read: `statusErr.ErrStatus.Code == 404` -> deleteResponse), and
    the engine then drops the resource from the state; the next up creates it again."""
    api = kube_cluster.api()
    assert stack.up().ok
    assert len(_configmaps(stack)) == 1
    api.delete(CONFIGMAP)

    refreshed = stack.refresh()
    assert refreshed.ok, refreshed.output()
    assert _configmaps(stack) == [], "refresh keeps a ConfigMap the API server no longer has"

    again = stack.up()
    assert again.ok, again.output()
    assert [op for op, urn in again.steps() if urn.endswith("::settings")] == ["create"]
    assert api.get(CONFIGMAP)["data"] == {"mode": "real"}


def test_destroy_deletes_what_up_created(stack, kube_cluster):
    api = kube_cluster.api()
    assert stack.up().ok
    destroyed = stack.destroy()
    assert destroyed.ok, destroyed.output()
    assert not api.exists(CONFIGMAP)
    assert not api.exists(f"/api/v1/namespaces/{NAMESPACE}"), (
        "the Namespace is gone once the namespace controller finalized it"
    )
    assert stack.resources() == {}
