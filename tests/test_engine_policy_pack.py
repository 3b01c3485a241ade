"""The project's policy pack (policies/) in the real engine, as the deploy job runs it
(`pulumi preview --policy-pack policies`): the engine starts the pack, sends it each resource
as the provider checked it, and fails the preview on a mandatory violation. The pack starts
through the executable route of `--policy-pack` (tools/harness/engine.py `policy_pack_shim`;
docs/decisions/055-the-real-engine-built-from-its-modules.md says why)."""

from __future__ import annotations

import pytest

from tests.helpers import engine
from tools.harness.engine import ROOT, EngineStack, policy_pack_shim

pytestmark = pytest.mark.engine

PROGRAM = """
import pulumi
import pulumi_command as command

config = pulumi.Config()
command.remote.Command(
    "gpu-0-driver",
    connection=command.remote.ConnectionArgs(
        host="192.0.2.10", user="ubuntu", host_key=config.get("hostKey"),
        private_key=config.require_secret("privateKey"),
    ),
    create="true",
)
"""
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH4fbbjgx1l1y9NV1wJz7K2ZlO9wAf3ZDpl1d3tU7Z3e"


@pytest.fixture
def stack(tmp_path, engine_binaries):
    program = engine.project(tmp_path / "program", "engine-policy", PROGRAM)
    stack = EngineStack.create(tmp_path / "work", program, "test", engine_binaries)
    stack.set_config({}, secrets={"engine-policy:privateKey": "not a key: preview only"})
    return stack


def test_the_pack_fails_a_preview_whose_remote_command_pins_no_host_key(stack, tmp_path):
    pack = policy_pack_shim(tmp_path, ROOT / "policies")
    unpinned = stack.preview(policy_packs=(pack,))
    assert not unpinned.ok
    assert "has no hostKey, so it would accept any host" in unpinned.output()

    stack.set_config({"engine-policy:hostKey": HOST_KEY})
    pinned = stack.preview(policy_packs=(pack,))
    assert pinned.ok, pinned.output()
