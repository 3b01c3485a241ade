"""The world of the end-to-end tests: the session's API server made an existing kubeadm cluster
(tests/helpers/existing_cluster.py), lab hosts for its control plane and the GPU servers
(tests/helpers/lab.py), a copy of the program a test may edit, one stack of it on the real
engine (tools/harness/engine.py) with the policy pack, and the kubelets of the lab's Nodes
(tests/helpers/kubelets.py), which run whenever the engine does.

    world.up()                  # `pulumi up --policy-pack policies`, the kubelets running
    world.node("a")             # the Node of GPU host a, from the API server
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.node_machine import host_id
from tests.helpers import lab
from tests.helpers.cluster import Api, Cluster
from tests.helpers.kubelets import Kubelets
from tools.harness.engine import ROOT, EngineStack, Operation, policy_pack_shim

CLUSTER = "e2e"
POOL = "gpu"
CONTROL_PLANE_NODE = "e2e-control-plane"  # the existing cluster's own control-plane Node
GPU_MODEL, GPUS = "A10G", 4
PROGRAM_FILES = ("__main__.py", "Pulumi.yaml")
PRIVATE_KEY = "gpu-cluster:sshPrivateKey"


def copy_program(directory: Path) -> Path:
    """The program as a checkout holds it (its Pulumi.yaml, __main__.py and components/): a
    test edits this copy, never the repository."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in PROGRAM_FILES:
        shutil.copyfile(ROOT / name, directory / name)
    shutil.copytree(
        ROOT / "components",
        directory / "components",
        ignore=shutil.ignore_patterns("__pycache__"),
        dirs_exist_ok=True,
    )
    return directory


@dataclass
class World:
    cluster: Cluster
    net: lab.Lab
    stack: EngineStack
    program: Path
    policy_pack: Path
    login_key: Path  # the stack's sshPrivateKey (its .pub authorized on every host)
    pool: dict[str, Any] = field(default_factory=dict)  # the pool's settings besides its hosts
    in_pool: list[str] = field(default_factory=list)  # GPU hosts the config names, in order
    kubelets: Kubelets | None = None

    @property
    def api(self) -> Api:
        return self.cluster.api()

    @property
    def control_plane(self) -> lab.Host:
        return self.net.hosts["cp"]

    def host(self, name: str) -> lab.Host:
        return self.net.hosts[name]

    @staticmethod
    def node_name(host: str) -> str:
        return f"{CLUSTER}-{POOL}-{host}"

    def node(self, host: str) -> dict[str, Any]:
        return self.api.get(f"/api/v1/nodes/{self.node_name(host)}")

    def has_node(self, host: str) -> bool:
        return self.api.exists(f"/api/v1/nodes/{self.node_name(host)}")

    # ---- the stack's configuration, as its file says it

    def config(self) -> dict[str, Any]:
        cp = self.control_plane
        hosts = [
            {"address": self.host(h).address, "name": h, "hostKey": self.host(h).host_public_key}
            for h in self.in_pool
        ]
        return {
            "gpu-cluster:clusterName": CLUSTER,
            "gpu-cluster:kubernetesVersion": "1.35",
            "gpu-cluster:controlPlane": {
                "mode": "existing",
                "host": cp.address,
                "endpoint": f"{cp.address}:{lab.API_PORT}",
                "hostKey": cp.host_public_key,
            },
            "gpu-cluster:ssh": {"user": lab.LOGIN_USER},
            "gpu-cluster:nodePools": [
                {
                    "name": POOL,
                    "gpu": {"model": GPU_MODEL, "count": GPUS},
                    **self.pool,
                    "hosts": hosts,
                }
            ],
            "gpu-cluster:validation": {"timeoutSeconds": 300},
        }

    def configure(self, *, private_key: Path | None = None) -> None:
        key = private_key or self.login_key
        self.stack.set_config(self.config(), secrets={PRIVATE_KEY: key.read_text()})

    def new_login_key(self, name: str) -> Path:
        """Another login key pair, as an operator makes one to rotate to."""
        path = self.login_key.parent / name
        lab.keygen(path, f"ops@{name}")
        return path

    def host_id(self, host: str) -> str:
        return host_id(self.host(host).host_public_key)

    # ---- the engine, with the machines' kubelets running

    def gpu_counts(self) -> dict[str, Callable[[], int]]:
        counts: dict[str, Callable[[], int]] = {CONTROL_PLANE_NODE: lambda: 0}
        for name, host in self.net.hosts.items():
            if name != "cp":
                counts[self.node_name(name)] = lambda h=host: int(h.state("nvidia-smi.gpus") or 0)
        return counts

    def _run(self, operation: Callable[[], Operation]) -> Operation:
        assert self.kubelets is not None
        with self.kubelets:
            result = operation()
        assert not self.kubelets.errors, self.kubelets.errors
        return result

    def settle(self, done: Callable[[], bool], what: str, seconds: float = 120) -> None:
        """The kubelets running until `done()` (outside an operation: the cluster acting on
        what a test created)."""
        assert self.kubelets is not None
        deadline = time.monotonic() + seconds
        with self.kubelets:
            while not done():
                assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
                time.sleep(0.5)
        assert not self.kubelets.errors, self.kubelets.errors

    def up(self, **kwargs: Any) -> Operation:
        """`pulumi up --policy-pack policies`, as the deploy job runs it."""
        return self._run(lambda: self.stack.up(policy_packs=(self.policy_pack,), **kwargs))

    def destroy(self, **kwargs: Any) -> Operation:
        return self._run(lambda: self.stack.destroy(**kwargs))


def make_world(
    cluster: Cluster, net: lab.Lab, work: Path, binaries: Path, hosts: list[str]
) -> World:
    program = copy_program(work / "program")
    stack = EngineStack.create(work / "engine", program, CLUSTER, binaries)
    login_key = work / "keys" / "login"
    public = lab.keygen(login_key, "ops@e2e")
    for host in net.hosts.values():
        host.authorize(public)
    world = World(
        cluster=cluster,
        net=net,
        stack=stack,
        program=program,
        policy_pack=policy_pack_shim(work, ROOT / "policies"),
        login_key=login_key,
        pool={
            "maxUnavailable": 1,
            "labels": {"team": "e2e"},
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        },
        in_pool=list(hosts),
    )
    world.kubelets = Kubelets(cluster.api(), world.gpu_counts())
    return world


# ---- the day-two planner against the engine

# What each step the engine reports (its event log, resOutputsEvent metadata.op: pulumi
# sdk/go/common/apitype/events.go `OpType`) did to a resource; a replacement is reported as two
# or three steps of one URN.
ENGINE_ACTIONS = {
    "same": "unchanged",
    "create": "create",
    "update": "update",
    "delete": "delete",
    "replace": "replace",
    "create-replacement": "replace",
    "delete-replaced": "replace",
}


def engine_actions(operation: Operation) -> dict[str, str]:
    """Per URN the program registered (the engine's default providers and the stack itself
    left out), what the engine did to it."""
    found: dict[str, str] = {}
    for op, urn in operation.steps():
        action = ENGINE_ACTIONS.get(op)
        engine_made = "::pulumi:pulumi:Stack::" in urn or (
            "::pulumi:providers:" in urn and "::default" in urn
        )
        if action is None or engine_made:
            continue
        if found.get(urn) != "replace":
            found[urn] = action
    return found


def planned_actions(plan: Any) -> dict[str, str]:
    from tools.lifecycle import Action

    names = {
        Action.CREATE: "create",
        Action.DELETE: "delete",
        Action.REPLACE: "replace",
        Action.UPDATE: "update",
        Action.RERUN: "update",
        Action.UNCHANGED: "unchanged",
        Action.BLOCKED: "blocked",
    }
    return {change.urn: names[change.action] for change in plan.changes}


def plan_of(
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    before_key: Path,
    after_key: Path | None = None,
    edit: tuple[str, Callable[[str], str]] | None = None,
):
    """tools.lifecycle's plan for the stack going from the `before` config to `after` (the
    program run under the SDK's mocks, with `edit`: a script as a commit edits it)."""
    import contextlib

    from tools.harness.stacks import edited_script, run_program
    from tools.lifecycle import plan

    def graph(config: dict[str, Any], key: Path):
        secrets = {"sshPrivateKey": key.read_text()}
        return run_program(CLUSTER, config=config, replace_config=True, secrets=secrets)

    old = graph(before, before_key)
    with edited_script(*edit) if edit else contextlib.nullcontext():
        new = graph(after, after_key or before_key)
    return plan(old, new)


def differences(plan: Any, *operations: Operation) -> list[str]:
    """Each URN whose planned action is not what the engine did (over `operations`: an `up`
    that failed partway and the one that finished its work)."""
    planned, done = planned_actions(plan), {}
    for operation in operations:
        for urn, action in engine_actions(operation).items():
            if done.get(urn, "unchanged") == "unchanged":
                done[urn] = action
    return [
        f"{urn.rsplit('::', 1)[1]}: planned {planned.get(urn, 'nothing')}, "
        f"the engine did {done.get(urn, 'nothing')}"
        for urn in sorted(planned.keys() | done.keys())
        if planned.get(urn) != done.get(urn)
    ]
