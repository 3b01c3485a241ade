"""A hook that fails reaches the engine as a failure (issue 40, review finding 1). The SDK answers
a hook that raised with `ResourceHookResponse(error=str(e))` (pulumi sdk/python/lib/pulumi/
runtime/_callbacks.py `do_register_resource_hook`) and the engine takes an empty error for
success (pkg/resource/deploy/source_eval.go `wrapResourceHookCallback`). Each hook is called here
the way the engine calls it: registered with the SDK's own callback servicer, then invoked by its
token with a serialized `ResourceHookRequest`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pulumi
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import _callbacks
from pulumi.runtime.proto import resource_pb2

from components.kube import bootstrap_token, node_hooks
from components.kube.api.slots import Slots
from components.kube.node_hooks import ClusterAccess, NodeHooks
from tests.helpers.fake_kube_api import run_async
from tools.harness.mocks import Mocks

NODE = "dev-gpu-a100-0"
MACHINE = "i-0123456789abcdef0"
SECRET = "c2VjcmV0LWtleS1ieXRlcw"  # what a kubeconfig's client key looks like (base64)


@dataclass(frozen=True)
class TimingOut(ClusterAccess):
    """The API never reached: `api()` raises TimeoutError(), whose str() is ""."""

    async def api(self):
        raise TimeoutError()


def _struct(value: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


ROLL = node_hooks.Roll(
    node_name=NODE,
    slots=Slots(pool="a100", max_unavailable=1, holder=NODE, hold_seconds=0, wait_seconds=0),
    drain_seconds=0,
    change="0" * 64,
)
TRIGGERS = {"triggers": [MACHINE]}


def hooks_of(
    access: ClusterAccess,
) -> list[tuple[pulumi.ResourceHook, resource_pb2.ResourceHookRequest]]:
    """Every hook the program registers, with the request the engine sends it."""
    hooks = NodeHooks(access)
    take_out = hooks.take_out(ROLL).before_update[0]
    return [
        (
            hooks.joins,
            resource_pb2.ResourceHookRequest(name=f"{NODE}-join", new_inputs=_struct(TRIGGERS)),
        ),
        (
            hooks.leaves,
            resource_pb2.ResourceHookRequest(name=f"{NODE}-join", old_inputs=_struct(TRIGGERS)),
        ),
        (
            hooks.in_service,
            resource_pb2.ResourceHookRequest(
                name=f"{NODE}-in-service", new_inputs=_struct({"environment": {}})
            ),
        ),
        (
            take_out,
            resource_pb2.ResourceHookRequest(name=f"{NODE}-runtime", new_inputs=_struct(TRIGGERS)),
        ),
        (
            bootstrap_token.mint_hook(f"{NODE}-join-token", access),
            resource_pb2.ResourceHookRequest(
                name=f"{NODE}-join-token", new_inputs=_struct({"input": {"node": NODE}})
            ),
        ),
    ]


def answer(access: ClusterAccess, index: int) -> tuple[str, str]:
    """(hook name, the error the engine reads back: `ResourceHookResponse.error`). The hooks are
    made on the loop they run on, as in the program."""

    async def call() -> tuple[str, str]:
        hook, request = hooks_of(access)[index]
        servicer = _callbacks._CallbackServicer(monitor=None)
        registered = servicer.do_register_resource_hook(hook)
        callback = servicer._callbacks[registered.callback.token]
        response = await callback(request.SerializeToString())
        return hook.name, response.error

    return run_async(call())


@pytest.fixture(autouse=True)
def monitor():
    """The SDK's mock monitor takes the hooks' registrations (the engine's, in a real run)."""
    pulumi.runtime.set_mocks(Mocks(), preview=False)


HOOKS = ["joins", "leaves", "in-service", "take-out", "mint"]


@pytest.mark.parametrize("index", range(len(HOOKS)), ids=HOOKS)
def test_a_hook_that_times_out_fails_naming_the_hook_and_its_node(index):
    name, error = answer(TimingOut(kubeconfig="unused"), index)
    assert error, f"{name}: an empty error is success to the engine"
    assert name in error and NODE in error and "TimeoutError" in error, error


def test_a_kubeconfig_that_does_not_parse_fails_without_quoting_it():
    kubeconfig = f"users:\n- name: admin\n  user: {{client-key-data: {SECRET}\n"
    name, error = answer(ClusterAccess(kubeconfig=kubeconfig), 0)
    assert error and name in error, error
    assert SECRET not in error, error


@dataclass(frozen=True)
class Unresolved(ClusterAccess):
    """A kubeconfig Output whose step never finishes (made on the loop the hook runs on)."""

    def __getattribute__(self, name):
        if name != "kubeconfig":
            return super().__getattribute__(name)
        loop = asyncio.get_running_loop()
        known, secret = loop.create_future(), loop.create_future()
        known.set_result(True)
        secret.set_result(False)
        return pulumi.Output(set(), loop.create_future(), known, secret)


def test_a_kubeconfig_never_known_fails_the_hook(monkeypatch):
    """The graph orders every hooked step after the kubeconfig step
    (tests/test_node_hooks_registered.py); the bound is a guard that fails, naming it."""
    monkeypatch.setattr(node_hooks, "KUBECONFIG_WAIT_SECONDS", 0)
    name, error = answer(Unresolved(kubeconfig="unused"), HOOKS.index("take-out"))
    assert name in error and "kubeconfig" in error, error
