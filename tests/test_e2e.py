"""End to end, on a local backend: the real Pulumi engine and providers (python -m tools.engine
build) run the program for a stack of existing GPU servers joined to an existing kubeadm
control plane. Each machine is a network namespace with a real sshd whose sessions run the real
host scripts with the stubs of tests/stubs first on PATH (tests/helpers/lab.py); the Kubernetes
side is the session's real API server, the hosts' kubectl is the real one, and the machines'
kubelets are a loop the tests run while the engine works (tests/helpers/kubelets.py).

The tests are one stack's life, in order, each continuing from the one before: the first `up`
after an interrupted first contact; an `up` that changes nothing; a script edit; a change that
rolls; a scale-down in the same `up` as a login-key rotation; a host that vanishes, then
`up --refresh`; a destroy. Every `up` runs the policy pack, as the deploy job does. Each asserts
what the stack and the machines show afterwards (the state, the Nodes, the pods, the files and
commands on each host), and that the day-two planner (tools.lifecycle) predicted what the engine
did. Why, and what it costs: docs/decisions/067-end-to-end-on-hosts-in-network-namespaces.md.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components.hosts import bundle
from components.node_machine import host_provider_id
from tests.helpers import e2e, existing_cluster, lab
from tests.helpers.e2e import CONTROL_PLANE_NODE, GPUS, World
from tools import lifecycle, recovery
from tools.harness.stacks import edited_script

pytestmark = pytest.mark.engine

GPU_HOSTS = ("a", "b")
NODE_SCRIPTS = {
    "wait-ready.sh",
    "disable-nouveau.sh",
    "install-driver.sh",
    "install-runtime.sh",
    "install-kube-tools.sh",
    "join-node.sh",
}
# What runs on the control plane of an existing cluster, at least: its checks and reads. (How
# nodes are drained and put back is not asserted by script: what it does is.)
CONTROL_PLANE_SCRIPTS = {"check-version-skew.sh", "read-kubeconfig.sh", "user-kubeconfig.sh"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
TENANT = "tenant"
# A real edit of install-driver.sh: a log line says more (a commit to the script).
DRIVER_EDIT = (
    "install-driver.sh",
    lambda text: text.replace(
        'log "driver ${DRIVER_VERSION} for kernel ${kernel}"',
        'log "driver ${DRIVER_VERSION} for kernel ${kernel}, pinned by gpu-cluster"',
    ),
)


@pytest.fixture(scope="module")
def lab_machine() -> None:
    """Before anything starts: where the lab cannot run, skip (fail under CI=true) naming why."""
    lab.require()


@pytest.fixture(scope="module")
def world(lab_machine, engine_binaries, kube_cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("e2e")
    port = int(kube_cluster.server.rsplit(":", 1)[1])
    with lab.running(work / "lab", port) as net:
        net.install_kubectl(engine_binaries / "kubectl")
        cp = net.add("cp", lab.CONTROL_PLANE_INDEX)
        net.forward_api(cp)
        existing_cluster.bootstrap(kube_cluster, f"{cp.address}:{lab.API_PORT}")
        existing_cluster.control_plane_machine(kube_cluster, cp, CONTROL_PLANE_NODE)
        for name in GPU_HOSTS:
            existing_cluster.gpu_server(net.add(name), GPUS)
        world = e2e.make_world(kube_cluster, net, work, engine_binaries, list(GPU_HOSTS))
        world.configure()
        yield world


# ---- what the machines and the cluster show


def installed_scripts(host: lab.Host) -> set[str]:
    """The host scripts whose programs (as bundled now) a step installed on `host` (by_digest)."""
    directory = host.sandbox.host_path(bundle.INSTALLED_DIR)
    digests = {p.name.removesuffix(".sh") for p in directory.glob("*.sh")}
    return {s for s in NODE_SCRIPTS | CONTROL_PLANE_SCRIPTS if bundle.digest(s) in digests}


def taints(node: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {k: v for k, v in t.items() if k in ("key", "value", "effect")}
        for t in node["spec"].get("taints", [])
    ]


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def jobs(world: World, namespace: str = "gpu-validation") -> dict[str, dict[str, Any]]:
    items = world.api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return {job["metadata"]["labels"]["gpu-cluster.io/node"]: job for job in items}


def pods_on(world: World, host: str) -> dict[str, str]:
    """namespace/name -> uid of the pods bound to the host's Node."""
    node = world.node_name(host)
    items = world.api.get(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")["items"]
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"] for p in items
    }


def assert_joined(world: World, host: str) -> None:
    """The host's Node as the program registers and proves it."""
    node = world.node(host)
    labels = node["metadata"]["labels"]
    assert labels["gpu-cluster.io/pool"] == e2e.POOL
    assert labels["gpu-cluster.io/instance-id"] == world.host_id(host)
    assert labels["nvidia.com/gpu.present"] == "true" and labels["team"] == "e2e"
    assert node["spec"]["providerID"] == host_provider_id(world.host_id(host))
    assert taints(node) == [GPU_TAINT], "the pool's taint only (the not-ready one lifted)"
    assert ready(node) == "True" and not node["spec"].get("unschedulable")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)
    job = jobs(world)[world.node_name(host)]
    assert job["status"].get("succeeded") == 1, job["status"]
    kubelet = yaml.safe_load(world.host(host).read("/etc/kubernetes/kubelet.conf"))
    assert (
        kubelet["clusters"][0]["cluster"]["server"] == f"https://{world.control_plane.address}:6443"
    )


def assert_planned(world: World, plan: Any, operation) -> None:
    """tools.lifecycle predicted, per URN, what the engine did."""
    assert e2e.differences(plan, operation) == []


# ---- the scenarios, in order


def test_the_first_up_after_an_interrupted_first_contact(world: World):
    """A host the stack did not create has no host-key rotation: its first contact is the copy
    of its scripts. The `up` is killed while host a's copy is halfway (its SFTP stalled), as a
    cancelled deploy job is: the file backend keeps its lock and the copies it was making as
    pending creates. `pulumi cancel` drops the lock; the next `up` warns about the pending
    operations, copies again and brings every node up."""
    a = world.host("a")
    copied = a.sandbox.host_path(f"{lab.LOGIN_HOME}/{bundle.REMOTE_DIR}/node")
    a.state(lab.STALL_FLAG, 4000)
    killed = world.up(interrupt=lambda: copied.is_dir() and any(copied.iterdir()))
    assert not killed.ok, killed.output()
    (a.sandbox.state_dir / lab.STALL_FLAG).unlink()
    pending = world.stack.state()["deployment"].get("pending_operations") or []
    assert ("creating", "e2e-gpu-a-scripts") in {
        (p["type"], p["resource"]["urn"].rsplit("::", 1)[1]) for p in pending
    }, pending
    partial = {p.name: p.stat().st_size for p in copied.iterdir()}
    assert not any(bundle.digest(s) + ".sh" in partial for s in NODE_SCRIPTS) or any(
        size < len(bundle.program(s).encode())
        for s in NODE_SCRIPTS
        if (size := partial.get(bundle.digest(s) + ".sh")) is not None
    ), f"the copy was not caught halfway: {partial}"
    assert "join-node.sh" not in installed_scripts(a), "no step ran before the copy"

    locked = world.up()
    assert not locked.ok and "the stack is currently locked" in locked.output(), locked.output()
    # docs/operations.md, "An interrupted up": drop the lock, then the interrupted creates
    # (an `up` alone creates them again but keeps warning about them in every later run).
    assert world.stack.cancel().returncode == 0
    cleared = world.stack.refresh(extra=("--clear-pending-creates",))
    assert cleared.ok, cleared.output()
    assert not world.stack.state()["deployment"].get("pending_operations")

    first = world.up()
    assert first.ok, first.output()
    assert "pending operations" not in first.output()
    assert "gpu-cluster@v0.0.1" in first.stdout, "the policy pack ran"
    for host in GPU_HOSTS:
        assert_joined(world, host)
        assert installed_scripts(world.host(host)) == NODE_SCRIPTS, host
        assert len(world.host(host).called("kubeadm", "join")) == 1, host
    assert installed_scripts(world.control_plane) == CONTROL_PLANE_SCRIPTS, "no node script"
    assert world.control_plane.called("kubeadm", "join") == []
    outputs = world.stack.outputs()
    assert outputs["gpuNodes"]["e2e-gpu-a"]["validated"] is True
    operator = yaml.safe_load(outputs["kubeconfig"])
    assert (
        operator["clusters"][0]["cluster"]["server"]
        == f"https://{world.control_plane.address}:6443"
    )


def seed_of(world: World, show_secrets: bool = False) -> dict[str, Any]:
    [seed] = [
        r
        for urn, r in world.stack.resources(show_secrets).items()
        if urn.endswith(f"::{e2e.CLUSTER}-{e2e.POOL}-join-token-seed")
    ]
    return seed


def test_a_second_up_changes_nothing_and_dials_no_host(world: World):
    """Every step `same`, no host dialed. The join tokens' seed, a Stash of a fresh secret each
    run, keeps the value stored at its create (components/kube/bootstrap_token.py `seed`), as
    a ciphertext in the state."""
    sessions = {name: host.sessions() for name, host in world.net.hosts.items()}
    seed = seed_of(world, show_secrets=True)
    again = world.up(expect_no_changes=True)
    assert again.ok, again.output()
    assert set(e2e.engine_actions(again).values()) == {"unchanged"}
    assert {name: host.sessions() for name, host in world.net.hosts.items()} == sessions
    assert seed["type"] == "pulumi:index:Stash"
    assert seed_of(world, show_secrets=True)["outputs"]["output"] == seed["outputs"]["output"]
    stored = seed_of(world)["outputs"]["output"]
    assert isinstance(stored, dict) and "ciphertext" in stored, "the seed is a secret"


def test_a_script_edit_reruns_its_step_on_every_node_without_a_roll(world: World):
    """An edit of install-driver.sh (not a comment): a new program, copied to each host and run
    there by its step, which finds its work done. A script edit re-runs no roll
    (components/hosts/rolling.py): no Node is cordoned, no pod moves, no Job runs again."""
    before, key = world.config(), world.login_key
    path = world.program / "components/hosts/scripts" / DRIVER_EDIT[0]
    path.write_text(DRIVER_EDIT[1](path.read_text()))
    world.kubelets.cordons.clear()
    jobs_before = {node: job["metadata"]["uid"] for node, job in jobs(world).items()}
    edited = world.up()
    assert edited.ok, edited.output()
    assert world.kubelets.cordons == []
    assert {node: job["metadata"]["uid"] for node, job in jobs(world).items()} == jobs_before
    with edited_script(*DRIVER_EDIT):
        program = f"{bundle.INSTALLED_DIR}/{bundle.digest(DRIVER_EDIT[0])}.sh"
    for host in GPU_HOSTS:
        assert world.host(host).exists(program), f"the edited program never ran on {host}"
        assert_joined(world, host)
    assert_planned(
        world, e2e.plan_of(before, world.config(), before_key=key, edit=DRIVER_EDIT), edited
    )


def test_a_change_of_what_the_driver_installs_rolls_node_by_node(world: World):
    """kernelModules open -> proprietary: the disruptive steps' parameters change (CHANGE), so
    each node is taken out (a slot of the pool: maxUnavailable 1, cordon, drain), changed,
    proven again (its validation Job replaced) and put back, one node at a time. A tenant's pods
    (a PodDisruptionBudget keeps one running) are evicted from each node in turn."""
    before, key = world.config(), world.login_key
    tenant = tenant_workload(world)
    world.pool["kernelModules"] = "proprietary"
    world.configure()
    world.kubelets.cordons.clear()
    world.kubelets.most_cordoned = 0
    world.kubelets.removed.clear()
    jobs_before = {node: job["metadata"]["uid"] for node, job in jobs(world).items()}
    rolled = world.up()
    assert rolled.ok, rolled.output()
    nodes = {world.node_name(h) for h in GPU_HOSTS}
    assert {node for node, cordoned in world.kubelets.cordons if cordoned} == nodes
    assert world.kubelets.most_cordoned == 1, world.kubelets.cordons
    assert world.kubelets.cordons[-1][1] is False, "every node put back"
    evicted = {(node, pod) for node, pod in world.kubelets.removed if pod.startswith(f"{TENANT}/")}
    assert {node for node, _ in evicted} == nodes, world.kubelets.removed
    assert not any(pod.startswith("nvidia-device-plugin/") for _, pod in world.kubelets.removed)
    for host in GPU_HOSTS:
        assert_joined(world, host)
        assert world.host(host).sandbox.installed("nvidia-headless-no-dkms-580-server")
    assert all(jobs(world)[n]["metadata"]["uid"] != jobs_before[n] for n in nodes)
    assert tenant  # the tenant's Deployment ran throughout
    assert_planned(world, e2e.plan_of(before, world.config(), before_key=key), rolled)


def tenant_workload(world: World) -> str:
    """Two pods of a tenant on the GPU nodes (one per node) and a budget that keeps one."""
    api = world.api
    api.create("/api/v1/namespaces", {"metadata": {"name": TENANT}})
    labels = {"app": TENANT}
    api.create(
        f"/apis/policy/v1/namespaces/{TENANT}/poddisruptionbudgets",
        {
            "metadata": {"name": TENANT},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    )
    api.create(
        f"/apis/apps/v1/namespaces/{TENANT}/deployments",
        {
            "metadata": {"name": TENANT},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "tolerations": [{**GPU_TAINT, "operator": "Equal"}],
                        "nodeSelector": {"gpu-cluster.io/pool": e2e.POOL},
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "labelSelector": {"matchLabels": labels},
                                        "topologyKey": "kubernetes.io/hostname",
                                    }
                                ]
                            }
                        },
                        "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10.1"}],
                    },
                },
            },
        },
    )
    world.settle(lambda: len(running_pods(world, TENANT)) == 2, "the tenant's two pods running")
    return TENANT


def running_pods(world: World, namespace: str) -> list[dict[str, Any]]:
    items = world.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return [p for p in items if p.get("status", {}).get("phase") == "Running"]


def test_a_scale_down_in_the_same_up_as_a_login_key_rotation(world: World, rotation):
    """The login key leaked: a new one is put on every host and the old one revoked there, then
    one `up` rotates sshPrivateKey and takes host b out of the pool. Node b is drained (its
    tenant pod evicted) and deleted through the Kubernetes API, with the credential valid when
    it runs; b itself is left as it is and not dialed; every step on a re-runs with the new key
    (an update: the connection changed), nothing of a is drained."""
    up = world.up()
    assert up.ok, up.output()

    assert not world.has_node("b")
    evicted = [pod for node, pod in world.kubelets.removed if node == "e2e-gpu-b"]
    assert any(pod.startswith(f"{TENANT}/") for pod in evicted), "b was not drained"
    assert not any(node == "e2e-gpu-a" for node, _ in world.kubelets.removed), "a was drained"
    b = world.host("b")
    assert b.disk() == rotation["b_disk"], "b was touched on its way out"
    assert b.sessions() == rotation["b_sessions"], "b was dialed on its way out"
    assert b.exists("/etc/kubernetes/kubelet.conf"), "left joined, as decision 054 says"
    assert {node for node, cordoned in world.kubelets.cordons if cordoned} <= {"e2e-gpu-b"}
    assert_joined(world, "a")
    assert world.host("a").sessions() > rotation["a_sessions"], "a's steps re-ran with the new key"
    plan = e2e.plan_of(
        rotation["before"],
        world.config(),
        before_key=rotation["old_key"],
        after_key=world.login_key,
    )
    assert e2e.differences(plan, up) == []
    before_graph, after_graph = rotation_graphs(world, rotation)
    hooks = recovery.hook_runs(lifecycle.plan(before_graph, after_graph), before_graph, after_graph)
    assert hooks and all(h.name.startswith("e2e-gpu-b-") for h in hooks), hooks


def rotation_graphs(world: World, rotation):
    from tools.harness.stacks import run_program

    def graph(config, key):
        return run_program(
            e2e.CLUSTER,
            config=config,
            replace_config=True,
            secrets={"sshPrivateKey": key.read_text()},
        )

    return graph(rotation["before"], rotation["old_key"]), graph(world.config(), world.login_key)


@pytest.fixture(scope="module")
def rotation(world: World) -> dict[str, Any]:
    """The change of the scale-down scenario, made once: a new login key on every host, the old
    one revoked there, the stack's config rotated and without host b."""
    old_key = world.login_key
    old_public = lab.public_key(old_key)
    new_key = world.new_login_key("login-2")
    for host in world.net.hosts.values():
        host.authorize(lab.public_key(new_key))
        host.revoke(old_public)
    found = {
        "before": world.config(),
        "old_key": old_key,
        "old_public": old_public,
        "b_disk": world.host("b").disk(),
        "b_sessions": world.host("b").sessions(),
        "a_sessions": world.host("a").sessions(),
    }
    world.kubelets.cordons.clear()
    world.kubelets.removed.clear()
    world.in_pool = ["a"]
    world.login_key = new_key
    world.configure()
    return found


def test_a_host_that_vanished_blocks_no_up_refresh(world: World):
    """Host a is gone (its namespace and sshd). Nothing of the stack reads a machine it did not
    create, so `up --refresh` changes nothing and dials nothing; the Node goes NotReady and
    unreachable as the node lifecycle controller marks a silent kubelet's."""
    a = world.host("a")
    sessions = world.control_plane.sessions()
    a.vanish()
    world.kubelets.stop(world.node_name("a"))
    refreshed = world.up(refresh=True)
    assert refreshed.ok, refreshed.output()
    assert set(e2e.engine_actions(refreshed).values()) == {"unchanged"}
    assert world.control_plane.sessions() == sessions
    world.settle(
        lambda: any(t["key"] == "node.kubernetes.io/unreachable" for t in taints(world.node("a"))),
        "the unreachable taint on Node a",
    )
    assert ready(world.node("a")) == "Unknown"
    state = world.stack.resources()
    assert any(urn.endswith("::e2e-gpu-a-join") for urn in state), "a's steps are kept"


def test_destroy_drains_the_dead_node_and_leaves_every_machine_as_it_is(world: World):
    """`pulumi destroy` with host a dead: its Node is drained (without eviction: its kubelet
    cannot confirm) and deleted from the control plane; every object of the stack is deleted;
    no machine is dialed but the control plane, and each keeps its files. With delete hooks in
    the state the destroy needs the program (decision 056); the state has none here."""
    disks = {name: world.host(name).disk() for name in GPU_HOSTS}
    sessions = world.host("b").sessions()
    state_graph = graph_of(world)
    hooks = any(r.get("resourceHooks") for r in world.stack.resources().values())
    destroyed = world.destroy(run_program=hooks)
    assert destroyed.ok, destroyed.output()
    assert world.stack.resources() == {} or set(
        r["type"] for r in world.stack.resources().values()
    ) <= {"pulumi:pulumi:Stack"}
    assert not world.has_node("a")
    # Its pods (the kubelet is gone: none can confirm) go once the Node is gone (the pod
    # garbage collector's orphans, pkg/controller/podgc `gcOrphaned`).
    world.settle(lambda: pods_on(world, "a") == {}, "the dead node's pods gone")
    # The namespaces were not awaited (a dead node's pods hold them): the namespace controller
    # finishes them once those pods are gone.
    gone = (
        "/api/v1/namespaces/nvidia-device-plugin",
        "/api/v1/namespaces/gpu-validation",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gpu-cluster-operators",
    )
    world.settle(lambda: not any(world.api.exists(p) for p in gone), "the stack's objects gone")
    assert world.api.exists(f"/api/v1/nodes/{CONTROL_PLANE_NODE}")
    assert world.control_plane.exists("/etc/kubernetes/admin.conf")
    assert {name: world.host(name).disk() for name in GPU_HOSTS} == disks
    assert world.host("b").sessions() == sessions
    plan = recovery.destroyed(state_graph)
    assert e2e.differences(plan, destroyed) == []
    hooks = recovery.hook_runs(plan, state_graph, plan_graph_empty())
    assert hooks and all(h.name.startswith("e2e-gpu-a-") for h in hooks), hooks


def graph_of(world: World):
    from tools.harness.stacks import run_program

    return run_program(
        e2e.CLUSTER,
        config=world.config(),
        replace_config=True,
        secrets={"sshPrivateKey": world.login_key.read_text()},
    )


def plan_graph_empty():
    from tools.harness.graph import Graph

    return Graph([], {})
