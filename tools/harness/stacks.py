"""Stack files and engine config, and running the real program for a stack.

`run_program("dev")` loads `Pulumi.dev.yaml` (plus test secrets), runs `__main__.py` under the
recorder with the provider answers of `mocks`, and returns the `Graph` of what it registered.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib
import ipaddress
import json
import runpy
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pulumi.runtime import set_all_config

from tools.harness.graph import Graph
from tools.harness.mocks import Mocks
from tools.harness.recorder import record

ROOT = Path(__file__).resolve().parents[2]
# The program's clock in every run, unless a test moves it: like the mocks' answers, the same
# on every run, so two runs of one program register the same join-token records.
PROGRAM_CLOCK = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
PROGRAM = ROOT / "__main__.py"
PROJECT = "gpu-cluster"
STACKS = ("dev", "staging", "prod")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _test_private_key() -> str:
    """A real ED25519 OpenSSH private key of the tests' own (never dialled with), as large as an
    operator's: what the state holds of every step's connection is measured with it."""
    from tools.harness.mocks import ed25519_key

    return ed25519_key("operator login")["privateKeyOpenssh"]


TEST_SECRETS = {"sshPrivateKey": _test_private_key()}

# The least a stack must say: the rest comes from the defaults in code. Where the operator
# connects from has no default: it is theirs to name.
MINIMAL_STACK = {
    "gpu-cluster:clusterName": "mini",
    "gpu-cluster:ssh": {
        "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"
        "ACaToBN0UdiKlqbTp6/sOn8o3Yjr3ArJbTXVaL+N9MQ ops@example"
    },
    "gpu-cluster:nodePools": [{"name": "a", "instanceType": "g5.xlarge", "count": 1}],
    "gpu-cluster:network": {"sshAllowedCidrs": ["203.0.113.0/24"]},
    "gpu-cluster:controlPlane": {"mode": "managed", "apiAllowedCidrs": ["203.0.113.0/24"]},
}


# Stacks the tests and the offline tools run but nobody deploys (no workflow reads this folder):
# `onprem`, a stack of existing hosts on an existing control plane.
TEST_STACKS_DIR = ROOT / "tests" / "stacks"


def stack_path(stack: str) -> Path:
    """Pulumi.<stack>.yaml: a deployed stack's at the top, else a test stack's."""
    name = f"Pulumi.{stack}.yaml"
    top = ROOT / name
    return (
        top if top.is_file() or not (TEST_STACKS_DIR / name).is_file() else TEST_STACKS_DIR / name
    )


@cache
def stack_file(stack: str) -> dict[str, Any]:
    """The `config:` of Pulumi.<stack>.yaml, as written."""
    data = yaml.safe_load(stack_path(stack).read_text())
    return dict(data.get("config") or {})


def engine_config(
    values: Mapping[str, Any], secrets: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Config as the CLI hands it to a program: every value a string, objects as JSON."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        flat[key] = value if isinstance(value, str) else json.dumps(value)
    secret_keys = []
    for key, value in secrets.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        flat[full] = value
        secret_keys.append(full)
    return flat, secret_keys


def set_stack_config(
    stack: str = "dev",
    *,
    config: Mapping[str, Any] | None = None,
    replace_config: bool = False,
    secrets: Mapping[str, str] | None = None,
) -> None:
    """Make the engine config what `pulumi up` on this stack would see (plus overrides)."""
    values: dict[str, Any] = {} if replace_config else dict(stack_file(stack))
    for key, value in (config or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = value
    flat, secret_keys = engine_config(values, TEST_SECRETS if secrets is None else secrets)
    set_all_config(flat, secret_keys)


def fleet_config(stack: str, nodes: int, pool: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Overrides that make a stack's fleet one pool of `nodes` nodes (`pool`, default the stack's
    first pool, with its `count` replaced), for the tools that model fleet sizes.

    A stack file is sized for its own few nodes, and the settings refuse a fleet its network
    or its control plane cannot hold (`components.settings.rules`). On a managed control plane
    the pod block is widened to hold a /NODE_POD_CIDR_PREFIX per node (the control plane's
    included), from the same first address, and a machine too small for the fleet gets the
    size the settings name: what an operator scaling that stack would set. The other network
    rules are left to refuse a fleet that does not fit, as they would in `pulumi up`.
    """
    from components.settings import control_plane_size
    from components.settings.constants import NODE_POD_CIDR_PREFIX

    written = stack_file(stack)
    template = dict(pool if pool is not None else written[f"{PROJECT}:nodePools"][0])
    overrides: dict[str, Any] = {"nodePools": [{**template, "count": nodes}]}
    control_plane = dict(written.get(f"{PROJECT}:controlPlane") or {})
    if control_plane.get("mode", "managed") != "managed":
        return overrides
    from components.settings.sections import ManagedControlPlane

    current = ipaddress.ip_network(
        control_plane.get("podCidr") or ManagedControlPlane.model_fields["pod_cidr"].default
    )
    needed = NODE_POD_CIDR_PREFIX - nodes.bit_length()  # room for nodes + 1 ranges
    if needed < current.prefixlen:
        wider = ipaddress.ip_network(f"{current.network_address}/{needed}", strict=False)
        control_plane["podCidr"] = str(wider)
    machine = (
        control_plane.get("instanceType")
        or ManagedControlPlane.model_fields["instance_type"].default
    )
    size = control_plane_size.instance_size(machine)
    if size is not None and not size.holds(control_plane_size.needed(nodes)):
        control_plane["instanceType"] = control_plane_size.to_use(machine, nodes)
    if control_plane != (written.get(f"{PROJECT}:controlPlane") or {}):
        overrides["controlPlane"] = control_plane
    return overrides


def load_stack_settings(stack: str = "dev", **kwargs: Any):
    """Only the loader (no program run): the validated Settings, or ConfigError."""
    from components.settings.load import load_settings

    set_stack_config(stack, **kwargs)
    return load_settings()


def run_program(
    stack: str = "dev",
    *,
    config: Mapping[str, Any] | None = None,
    replace_config: bool = False,
    secrets: Mapping[str, str] | None = None,
    program: Path | Callable[[], None] = PROGRAM,
    record_inputs: bool = True,
    clock: datetime.datetime = PROGRAM_CLOCK,
    state: Graph | None = None,
    replace: Collection[str] = (),
    preview: bool = False,
) -> Graph:
    """Run the program for a stack file and return its registered graph (with `preview`, as
    `pulumi preview` would: recorder.record).

    `config` overrides (or with `replace_config`, replaces) keys of Pulumi.<stack>.yaml; keys may
    be given without the `gpu-cluster:` prefix. `secrets` default to a test SSH key. Without
    `record_inputs` the graph's resources carry no inputs (tools.benchmark: see
    recorder.RecordingMonitor). `clock` is what the program's clock reads; `state`, what an
    earlier run left, and `replace`, what `pulumi up --replace` names (recorder.record).
    """
    set_stack_config(stack, config=config, replace_config=replace_config, secrets=secrets)

    def run_file() -> None:
        runpy.run_path(str(program), run_name="__main__")

    with program_clock(clock), program_entropy():
        return record(
            program if callable(program) else run_file,
            Mocks(),
            project=PROJECT,
            stack=stack,
            record_inputs=record_inputs,
            state=state,
            replace=replace,
            preview=preview,
        )


@contextlib.contextmanager
def program_clock(at: datetime.datetime) -> Iterator[None]:
    """The program's clock reads `at` (components/kube/bootstrap_token.py `clock`), in the
    program being run: a checkout of an earlier release (tools.lifecycle.program_of) has no
    clock of its own to set."""
    try:
        fixed = getattr(importlib.import_module("components.kube.bootstrap_token"), "clock", None)
    except ModuleNotFoundError:
        fixed = None
    with fixed(lambda: at) if fixed is not None else contextlib.nullcontext():
        yield


def mock_secret(name: str) -> str:
    """A seed's value under the mocks: one per resource name, as they answer a generated key,
    so two runs of one config register the same tokens."""
    return hashlib.sha256(f"gpu-cluster mock secret {name}".encode()).hexdigest()


@contextlib.contextmanager
def program_entropy() -> Iterator[None]:
    """The program's fresh secrets are `mock_secret` (components/kube/bootstrap_token.py
    `entropy`), where the program being run has them."""
    try:
        fixed = getattr(importlib.import_module("components.kube.bootstrap_token"), "entropy", None)
    except ModuleNotFoundError:
        fixed = None
    with fixed(mock_secret) if fixed is not None else contextlib.nullcontext():
        yield


@contextlib.contextmanager
def edited_script(name: str, edit: Callable[[str], str]) -> Iterator[None]:
    """The host script `name` as `edit(text)` returns it, for the program runs inside: what a
    commit that edits it would register. The texts, stripped texts, bundled programs and their
    digests are kept per process (functools.cache): each is dropped around the edit."""
    from components.hosts import bundle, rendering

    original = rendering.script_text
    caches = (rendering.stripped_script, bundle.program, bundle.digest)

    def patched(script: str) -> str:
        text = original(script)
        return edit(text) if script == name else text

    rendering.script_text = patched  # type: ignore[assignment]
    for cached in caches:
        cached.cache_clear()
    try:
        yield
    finally:
        rendering.script_text = original  # type: ignore[assignment]
        for cached in caches:
            cached.cache_clear()
