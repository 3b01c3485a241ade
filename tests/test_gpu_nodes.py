"""GpuNodePool / GpuNode on the registered graph of the real program, for every stack file.

What is asserted is what the engine receives: dependencies (the per-node chain, no edge between
nodes), inputs (IMDSv2, encrypted gp3, spot, subnets, tags, script parameters, the join token
record), secret markers and delete/replace options (teardown order: drain -> terminate).
"""

from __future__ import annotations

import re
from functools import cache
from itertools import combinations, pairwise

import pytest
import yaml

from components.catalog import CATALOG
from components.hosts import steps
from components.hosts.remote import DIAL_FOREVER
from components.kube import node_hooks
from components.settings.constants import POOL_LABEL
from tools.harness import mocks
from tools.harness.graph import (
    HOST_CHAIN,
    VALIDATION_CHAIN,
    Graph,
    Resource,
    Secret,
    plain_strings,
    script_params,
    secret_paths,
    unwrap,
)
from tools.harness.stacks import STACKS, TEST_SECRETS, load_stack_settings, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
COMMAND = "command:remote:Command"
GPU_NODE = "gpu-cluster:index:GpuNode"
# The per-node chain of the interface contract, after the instance `<node>`.
ANYWHERE = {"0.0.0.0/0", "::/0"}


@cache
def graph(stack: str, overrides: str = "") -> Graph:
    """The program's graph for a stack file; `overrides` is YAML of config overrides (hashable,
    so one run serves every test that asks for the same configuration)."""
    return run_program(stack, config=yaml.safe_load(overrides) if overrides else None)


def config(stack: str, key: str):
    return stack_file(stack)[f"gpu-cluster:{key}"]


def pools_with(stack: str, **changes_by_pool: dict) -> str:
    """YAML overrides of the stack's nodePools, with `changes_by_pool[name]` merged into a pool."""
    pools = [
        {**pool, **changes_by_pool.get(pool["name"], {})} for pool in config(stack, "nodePools")
    ]
    return yaml.safe_dump({"nodePools": pools}, sort_keys=True)


def node_names(stack: str, overrides: str = "") -> list[str]:
    pools = yaml.safe_load(overrides)["nodePools"] if overrides else config(stack, "nodePools")
    cluster = config(stack, "clusterName")
    return [f"{cluster}-{p['name']}-{i}" for p in pools for i in range(p["count"])]


def pool_of(stack: str, node: str) -> dict:
    cluster = config(stack, "clusterName")
    return next(
        p
        for p in config(stack, "nodePools")
        if re.fullmatch(rf"{re.escape(cluster)}-{re.escape(p['name'])}-\d+", node)
    )


def owned_by(g: Graph, node: str) -> list[Resource]:
    """The resources of one node: the instance `<node>` and everything named `<node>-...`."""
    return g.find(lambda r: r.name == node or r.name.startswith(f"{node}-"))


def step(g: Graph, name: str) -> Resource:
    return g.named(name)


def script_inputs(resource: Resource) -> dict[str, str]:
    return script_params(resource)


def full_chain(g: Graph, node: str) -> list[str]:
    chain = [node, *(f"{node}-{s}" for s in HOST_CHAIN)]
    if g.find(lambda r: r.name == f"{node}-{steps.VALIDATION_JOB.suffix}"):
        chain += [f"{node}-{s}" for s in VALIDATION_CHAIN]
    return chain


# ---------------------------------------------------------------- the chain


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_runs_its_chain_in_contract_order(stack):
    g = graph(stack)
    for node in node_names(stack):
        chain = [g.named(name) for name in full_chain(g, node)]
        assert chain[0].type == INSTANCE, f"{chain[0].urn} should be the node's EC2 instance"
        for before, after in pairwise(chain):
            assert before.urn in g.direct_dependencies(after), (
                f"{after.urn} must wait directly for {before.urn}"
            )
            assert not g.depends_on(before, after), f"{before.urn} must not wait for {after.urn}"
        instance_id = chain[0].outputs.get("id") or None
        for command in (r for r in chain if r.type == COMMAND):
            # Identity only: the machine (and, for the join, the cluster). The order of the
            # chain is in the dependencies; a re-run of one step never cascades.
            triggers = unwrap(command.inputs["triggers"])
            assert 1 <= len(triggers) <= 3, f"{command.urn}: triggers {triggers}"
            assert instance_id is None or triggers[0] == instance_id, (
                f"{command.urn}: first trigger {triggers[0]} is not the machine's id"
            )


@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_nodes_never_wait_on_each_other(stack):
    g = graph(stack)
    nodes = node_names(stack)
    assert len(nodes) >= 2, f"{stack} should have several nodes to compare"
    owned = {node: {r.urn for r in owned_by(g, node)} for node in nodes}
    reach = {node: set().union(*(g.ancestors(r) for r in owned_by(g, node))) for node in nodes}
    for a, b in combinations(nodes, 2):
        assert not reach[a] & owned[b], f"{a} waits on {sorted(reach[a] & owned[b])} of {b}"
        assert not reach[b] & owned[a], f"{b} waits on {sorted(reach[b] & owned[a])} of {a}"


def test_nodes_of_one_pool_never_wait_on_each_other():
    overrides = pools_with("dev", a10g={"count": 3})
    g = graph("dev", overrides)
    nodes = node_names("dev", overrides)
    for a, b in combinations(nodes, 2):
        for waiter, other in ((a, b), (b, a)):
            # Its last resource: it waits for everything of its own chain.
            last = g.named(f"{waiter}-in-service")
            for resource in owned_by(g, other):
                assert not g.depends_on(last, resource), f"{last.urn} waits on {resource.urn}"


@pytest.mark.parametrize("stack", STACKS)
def test_host_steps_keep_dialling_within_a_bounded_time(stack):
    """custom_timeouts bound only the dial (pulumi-command): the script is bounded on the host by
    `timeout -k`, run as root so the kill reaches root's processes; `update` is set explicitly;
    no step stores a `delete`, so none dials on delete."""
    g = graph(stack)
    for node in node_names(stack):
        for row in steps.NODE_ROWS:
            if row.script is None or (row is steps.EFA and not pool_of(stack, node).get("efa")):
                continue
            resource = step(g, row.resource_name(node))
            inputs = resource.plain_inputs()
            connection = inputs["connection"]
            assert connection["dialErrorLimit"] == DIAL_FOREVER, f"{resource.urn}: {connection}"
            assert not inputs.get("delete"), f"{resource.urn}: dials on delete"
            assert resource.custom_timeouts.get("create"), f"{resource.urn}: no create timeout"
            seconds = row.timeout_seconds
            params = script_params(resource)
            if row is steps.JOIN:  # and the wait for its GPUs, validation.timeoutSeconds
                seconds += int(params["CAPACITY_TIMEOUT_SECONDS"])
            assert inputs["create"] == f"sudo timeout -k 30 {seconds} bash -s", (
                f"{resource.urn}: {inputs['create']}"
            )
            assert inputs["update"] == inputs["create"], f"{resource.urn}: update {inputs}"
            assert inputs["addPreviousOutputInEnv"] is False, f"{resource.urn}"
            bound = int(resource.custom_timeouts["create"].removesuffix("s"))
            assert bound > seconds, f"{resource.urn}: dial bound {bound}"


# ---------------------------------------------------------------- host step parameters


@pytest.mark.parametrize("stack", STACKS)
def test_driver_step_gets_the_pools_branch_gpu_count_and_fabric_manager(stack):
    g = graph(stack)
    for node in node_names(stack):
        pool = pool_of(stack, node)
        gpu_type = CATALOG[pool["instanceType"]]
        driver = step(g, f"{node}-driver")
        params = script_inputs(driver)
        assert params.get("DRIVER_BRANCH") == str(pool["driverVersion"]), f"{driver.urn}: {params}"
        assert params.get("GPU_COUNT") == str(gpu_type.gpu_count), f"{driver.urn}: {params}"
        expected_fm = "true" if gpu_type.needs_fabric_manager else "false"
        assert params.get("NEEDS_FABRIC_MANAGER") == expected_fm, f"{driver.urn}: {params}"


# One pool per GPU generation of the catalog (the first instance type of each), on a branch every
# GPU supports, with the kernel module type each must get: NVIDIA's open modules are required on
# Blackwell and the default on Turing and newer; Volta has only the proprietary ones.
GENERATIONS = {
    "volta": "proprietary",
    "turing": "open",
    "ampere": "open",
    "ada-lovelace": "open",
    "hopper": "open",
    "blackwell": "open",
}


def _one_pool_per_generation() -> str:
    first: dict[str, str] = {}
    for name in sorted(CATALOG):
        first.setdefault(CATALOG[name].gpu.architecture, name)
    assert set(first) == set(GENERATIONS), f"catalog generations changed: {sorted(first)}"
    pools = [
        {
            "name": arch.replace("-", ""),
            "instanceType": first[arch],
            "count": 1,
            "driverVersion": "580",
        }
        for arch in sorted(first)
    ]
    return yaml.safe_dump({"nodePools": pools}, sort_keys=True)


def test_driver_step_gets_the_kernel_module_type_of_each_gpu_generation():
    overrides = _one_pool_per_generation()
    g = graph("dev", overrides)
    for pool in yaml.safe_load(overrides)["nodePools"]:
        arch = CATALOG[pool["instanceType"]].gpu.architecture
        driver = step(g, f"{config('dev', 'clusterName')}-{pool['name']}-0-driver")
        params = script_inputs(driver)
        # g4dn and g5 run the proprietary module without GSP (tests/test_driver_packages.py).
        wanted = GENERATIONS[arch] if CATALOG[pool["instanceType"]].gsp_firmware else "proprietary"
        assert params.get("KERNEL_MODULES") == wanted, f"{driver.urn}: {params}"
        nvlsm = "true" if arch == "blackwell" else "false"
        assert params.get("NVLINK_SUBNET_MANAGER") == nvlsm, f"{driver.urn}: {params}"
        # The nouveau step picks the kernel by the same module package name.
        nouveau = script_inputs(step(g, driver.name.removesuffix("-driver") + "-nouveau"))
        assert nouveau.get("KERNEL_MODULES") == wanted, f"{driver.urn}: {nouveau}"
        assert nouveau.get("DRIVER_BRANCH") == "580", f"{driver.urn}: {nouveau}"


def test_kernel_modules_override_reaches_the_driver_step():
    pools = [
        {"name": "a10g", "instanceType": "g5.xlarge", "count": 1, "kernelModules": "proprietary"}
    ]
    g = graph("dev", yaml.safe_dump({"nodePools": pools}, sort_keys=True))
    driver = step(g, f"{config('dev', 'clusterName')}-a10g-0-driver")
    assert script_inputs(driver).get("KERNEL_MODULES") == "proprietary", f"{driver.urn}"


def test_fabric_manager_on_p5_only_in_prod():
    g = graph("prod")
    for node, expected in (("prod-gpu-h100-0", "true"), ("prod-gpu-a10g-0", "false")):
        driver = step(g, f"{node}-driver")
        params = script_inputs(driver)
        assert params["NEEDS_FABRIC_MANAGER"] == expected, f"{driver.urn}: {params}"
    h100 = script_inputs(step(g, "prod-gpu-h100-0-driver"))
    assert h100["GPU_COUNT"] == "8", f"prod-gpu-h100-0-driver: {h100}"


@pytest.mark.parametrize("stack", STACKS)
def test_kube_tools_and_join_pinned_to_the_configured_minor(stack):
    g = graph(stack)
    minor = config(stack, "kubernetesVersion")
    for node in node_names(stack):
        for name in (f"{node}-kube-tools", f"{node}-join"):
            params = script_inputs(step(g, name))
            assert params.get("KUBERNETES_MINOR") == minor, f"{g.named(name).urn}: {params}"


@pytest.mark.parametrize("stack", STACKS)
def test_join_configuration_inputs(stack):
    g = graph(stack)
    settings = load_stack_settings(stack)
    for node in node_names(stack):
        pool = pool_of(stack, node)
        instance = g.named(node)
        join = step(g, f"{node}-join")
        params = script_inputs(join)
        assert params["NODE_NAME"] == node, f"{join.urn}: {params['NODE_NAME']}"
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", params["CA_CERT_HASH"]), f"{join.urn}"
        assert params["CA_CERT_HASH"] == mocks.CA_CERT_HASH, f"{join.urn}: not the kubeconfig's"
        assert re.fullmatch(r"[A-Za-z0-9.-]+:\d+", params["API_ENDPOINT"]), f"{join.urn}"
        # Only what the node's DaemonSets select on before it is proven: the labels that steer
        # workloads come from the control plane (`<node>-in-service`).
        labels = dict(item.split("=", 1) for item in params["NODE_LABELS"].split(","))
        expected = {"nvidia.com/gpu.present": "true"}
        if pool.get("efa"):
            expected["gpu-cluster.io/efa"] = "true"
        assert labels == expected, f"{join.urn}: labels {labels}"
        # As AWS's cloud provider writes it: the zone the provider reads back, the machine.
        assert re.fullmatch(
            rf"aws:///[a-z]{{2}}-[a-z]+-\d[a-z]/{re.escape(instance.id)}", params["PROVIDER_ID"]
        ), f"{join.urn}: {params['PROVIDER_ID']}"
        taints = params["NODE_TAINTS"].split(",") if params["NODE_TAINTS"] else []
        configured = pool.get(
            "taints", [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
        )
        # The pool's taints and the proof taint, which the node keeps until its checks passed.
        assert taints == [
            *(f"{t['key']}={t['value']}:{t['effect']}" for t in configured),
            "gpu-cluster.io/unproven:NoSchedule",
        ], f"{join.urn}: taints {taints}"
        # The join's own checks: Ready within its bound, then every GPU (each time-sliced share)
        # allocatable within validation.timeoutSeconds; none with validation disabled.
        shares = settings.device_plugin.time_slicing.replicas
        gpus = CATALOG[pool["instanceType"]].gpu_count * shares
        enabled = settings.validation.enabled
        assert params["EXPECTED_GPUS"] == (str(gpus) if enabled else ""), f"{join.urn}: {params}"
        assert params["CAPACITY_TIMEOUT_SECONDS"] == str(settings.validation.timeout_seconds)
        assert int(params["READY_TIMEOUT_SECONDS"]) > 0, f"{join.urn}"
        assert params["DEVICE_PLUGIN_NAMESPACE"] == "nvidia-device-plugin", f"{join.urn}"
        # A disruptive change re-runs the checks: the same digest as the roll around it.
        in_service = g.named(f"{node}-in-service").plain_inputs()["environment"]
        assert params["CHANGE"] == in_service["CHANGE"], f"{join.urn}: {params['CHANGE']}"


# ---------------------------------------------------------------- secrets and teardown


@pytest.mark.parametrize("stack", STACKS)
def test_join_token_only_inside_the_secret_stdin(stack):
    g = graph(stack)
    for node in node_names(stack):
        join = step(g, f"{node}-join")
        assert isinstance(join.inputs["stdin"], Secret), f"{join.urn}: stdin carries the token"
        token = script_inputs(join)["JOIN_TOKEN"]
        assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token), f"{join.urn}: no token on stdin"
        assert "JOIN_TOKEN" not in unwrap(join.inputs["create"]), f"{join.urn}: token in create"
        for resource in g:
            leaks = [s for s in plain_strings(resource.inputs) if token.split(".")[1] in s]
            assert not leaks, f"{resource.urn}: join token of {node} in a plain input"
        record = step(g, f"{node}-join-token")
        held = record.inputs["input"]
        assert isinstance(held["tokenSecret"], Secret), f"{record.urn}: token in plain"


# The join token record, its mint and its day two: tests/test_join_token.py.


def _under_secret(path: str, secret: list[str]) -> bool:
    """True when `path` is a secret or inside one (the SDK may mark a whole object secret)."""
    return any(path == s or path.startswith(f"{s}.") or s == "." for s in secret)


@pytest.mark.parametrize("stack", STACKS)
def test_ssh_key_and_kubeconfig_are_secret_everywhere(stack):
    g = graph(stack)
    key_body = TEST_SECRETS["sshPrivateKey"].splitlines()[1]
    for resource in g:
        leaks = [s for s in plain_strings(resource.inputs) if key_body in s]
        assert not leaks, f"{resource.urn}: SSH private key in a plain input"
    for node in node_names(stack):
        for resource in owned_by(g, node):
            if resource.type != COMMAND:
                continue
            paths = secret_paths(resource.inputs)
            wanted = ["connection.privateKey"]
            if config(stack, "network").get("bastion"):
                wanted.append("connection.proxy.privateKey")
            for path in wanted:
                assert _under_secret(path, paths), f"{resource.urn}: {path} not secret ({paths})"
    assert isinstance(g.outputs.get("kubeconfig"), Secret), f"stack {stack}: kubeconfig output"
    assert not [s for s in plain_strings(g.outputs) if key_body in s], f"stack {stack} outputs"


@pytest.mark.parametrize("stack", STACKS)
def test_teardown_drains_then_terminates_and_never_dials_a_host(stack):
    """No step stores a `delete` (pulumi-command's Delete would dial the stored host with the
    stored connection): the join's before-delete hook drains and deletes the Node through the
    API, before the instance it runs for terminates (Pulumi deletes dependents first), and a
    replaced join is deleted first, so its Node is gone before the new one registers."""
    g = graph(stack)
    for node in node_names(stack):
        instance, join = g.named(node), step(g, f"{node}-join")
        for resource in owned_by(g, node):
            if resource.type == COMMAND:
                assert not resource.plain_inputs().get("delete"), f"{resource.urn}: dials"
        assert join.hooks == {
            "before_create": [node_hooks.JOINS],
            "before_delete": [node_hooks.LEAVES],
        }, f"{join.urn}: {join.hooks}"
        assert join.delete_before_replace, f"{join.urn}: its Node goes before a new join"
        assert g.depends_on(join, instance), f"{join.urn} must go before {instance.urn}"


# ---------------------------------------------------------------- re-runs and scaling


def _all_inputs(g: Graph, node: str) -> dict[str, dict]:
    return {r.name: unwrap(r.inputs) for r in owned_by(g, node)}


def test_changing_a_pools_driver_changes_only_its_driver_steps():
    """Only that pool's driver steps change, with the roll around them: the join's checks (its
    CHANGE) and the put in service after (its CHANGE; the take-out is the driver step's own
    hook); the Job is replaced, so it runs again; tests/test_lifecycle.py has what the engine
    makes of it."""
    before = graph("prod")
    after = graph("prod", pools_with("prod", h100={"driverVersion": "570"}))
    # The nouveau step checks the archive has a signed module of the new branch (and may move
    # to a kernel that has one), so it re-runs inside the roll too.
    rolled = ("nouveau", "driver", "join", "validation-job", "in-service")
    for node in node_names("prod"):
        for resource in owned_by(after, node):
            old = before.by_urn[resource.urn]
            same = old.plain_inputs() == resource.plain_inputs()
            expect_change = "-h100-" in node and resource.name in {f"{node}-{s}" for s in rolled}
            assert same != expect_change, f"{resource.urn}: changed={not same}"


def test_scaling_a_pool_from_3_to_2_removes_exactly_the_last_node():
    three = graph("dev", pools_with("dev", a10g={"count": 3}))
    two = graph("dev", pools_with("dev", a10g={"count": 2}))
    for node in ("dev-gpu-a10g-0", "dev-gpu-a10g-1"):
        assert _all_inputs(three, node) == _all_inputs(two, node), f"{node}: inputs changed"
        for r in owned_by(two, node):
            assert r.urn in three.by_urn, f"{r.urn}: not in the 3-node graph"
    removed = {r.urn for r in three} - {r.urn for r in two}
    expected = {r.urn for r in owned_by(three, "dev-gpu-a10g-2")}
    assert removed == expected, (
        f"removed {sorted(removed - expected)} / kept {sorted(expected - removed)}"
    )
    added = {r.urn for r in two} - {r.urn for r in three}
    assert not added, f"scaling down added {sorted(added)}"


# ---------------------------------------------------------------- instances


@pytest.mark.parametrize("stack", STACKS)
def test_instances_require_imdsv2_and_encrypt_their_gp3_root(stack):
    g = graph(stack)
    for node in node_names(stack):
        pool = pool_of(stack, node)
        instance = g.named(node).plain_inputs()
        urn = g.named(node).urn
        meta = instance["metadataOptions"]
        assert meta["httpTokens"] == "required", f"{urn}: IMDSv2 {meta}"
        assert meta["httpPutResponseHopLimit"] == pool.get("metadataHopLimit", 1), f"{urn}: {meta}"
        root = instance["rootBlockDevice"]
        assert root["encrypted"] is True and root["volumeType"] == "gp3", f"{urn}: {root}"
        assert root["volumeSize"] == pool["rootVolumeGiB"], f"{urn}: {root}"
        assert instance["instanceType"] == pool["instanceType"], f"{urn}"
    # Every instance in the stack, the control plane's too.
    for resource in g.of_type(INSTANCE):
        inputs = resource.plain_inputs()
        assert inputs["metadataOptions"]["httpTokens"] == "required", f"{resource.urn}"
        assert inputs["rootBlockDevice"]["encrypted"] is True, f"{resource.urn}"


def test_hop_limit_from_config():
    g = graph("dev", pools_with("dev", a10g={"metadataHopLimit": 2}))
    meta = g.named("dev-gpu-a10g-0").plain_inputs()["metadataOptions"]
    assert meta["httpPutResponseHopLimit"] == 2, f"{g.named('dev-gpu-a10g-0').urn}: {meta}"


@pytest.mark.parametrize("stack", STACKS)
def test_spot_market_only_for_spot_pools(stack):
    g = graph(stack)
    for node in node_names(stack):
        resource = g.named(node)
        market = resource.plain_inputs().get("instanceMarketOptions")
        if pool_of(stack, node).get("market") == "spot":
            assert market and market["marketType"] == "spot", f"{resource.urn}: {market}"
        else:
            assert not market, f"{resource.urn}: on-demand pool with market options {market}"


def test_instances_round_robin_over_the_given_subnets():
    g = graph("prod")
    subnets = config("prod", "network")["subnetIds"]
    for index in range(4):
        resource = g.named(f"prod-gpu-a10g-{index}")
        subnet = resource.plain_inputs()["subnetId"]
        assert subnet == subnets[index % len(subnets)], f"{resource.urn}: subnet {subnet}"


def test_instances_spread_over_the_created_subnets():
    g = graph("dev", pools_with("dev", a10g={"count": 3}))
    subnets = [g.named(f"dev-gpu-a10g-{i}").plain_inputs()["subnetId"] for i in range(3)]
    assert subnets[0] != subnets[1] and subnets[0] == subnets[2], f"dev-gpu-a10g-*: {subnets}"


@pytest.mark.parametrize("stack", STACKS)
def test_everything_of_a_pool_is_tagged(stack):
    g = graph(stack)
    tags = {**config(stack, "tags"), "gpu-cluster:cluster": config(stack, "clusterName")}
    for node in node_names(stack):
        resource = g.named(node)
        inputs = resource.plain_inputs()
        assert inputs["tags"]["Name"] == node, f"{resource.urn}: {inputs['tags']}"
        assert tags.items() <= inputs["tags"].items(), f"{resource.urn}: {inputs['tags']}"
        assert tags.items() <= inputs["rootBlockDevice"]["tags"].items(), f"{resource.urn}: volume"
    pools = g.of_type("gpu-cluster:index:GpuNodePool")
    for pool in pools:
        for child in g.children(pool):
            if child.type.startswith("aws:"):
                assert tags.items() <= child.plain_inputs()["tags"].items(), f"{child.urn}: tags"


def test_configured_ami_id_is_used_and_not_ignored():
    g = graph("dev", pools_with("dev", a10g={"amiId": "ami-0123456789abcdef0"}))
    resource = g.named("dev-gpu-a10g-0")
    assert resource.plain_inputs()["ami"] == "ami-0123456789abcdef0", f"{resource.urn}"
    assert "ami" not in resource.ignore_changes, f"{resource.urn}: a configured AMI must apply"
    looked_up = graph("dev").named("dev-gpu-a10g-0")
    assert looked_up.plain_inputs()["ami"].startswith("ami-"), f"{looked_up.urn}"
    assert "ami" in looked_up.ignore_changes, f"{looked_up.urn}: new Canonical AMI must not replace"


@pytest.mark.parametrize("stack", STACKS)
def test_a_replaced_gpu_machine_goes_before_its_successor_comes(stack):
    """A planned replacement (amiId, market, efa) deletes the node's steps (drain, reset), then
    the machine, then launches the new one: created first, it could not join under the name of
    a Node still Ready, nor take the old machine's EFA interfaces. The control plane keeps the
    engine's default."""
    machines = graph(stack).of_type(INSTANCE)
    gpu_machines = [m for m in machines if POOL_LABEL in m.plain_inputs()["tags"]]
    assert gpu_machines, f"{stack}: no GPU machines"
    for machine in machines:
        expected = machine in gpu_machines
        assert machine.delete_before_replace is expected, (
            f"{machine.urn}: delete before replace should be {expected}"
        )


# ---------------------------------------------------------------- network access


def _ingress_rules(g: Graph) -> list[tuple[Resource, dict]]:
    rules = []
    for resource in g:
        inputs = resource.plain_inputs()
        if resource.type == SECURITY_GROUP:
            rules += [(resource, rule) for rule in inputs.get("ingress") or []]
        elif resource.type == "aws:ec2/securityGroupRule:SecurityGroupRule":
            if inputs.get("type") == "ingress":
                rules.append((resource, inputs))
        elif resource.type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
            rules.append(
                (
                    resource,
                    {
                        "protocol": inputs.get("ipProtocol"),
                        "fromPort": inputs.get("fromPort", 0),
                        "toPort": inputs.get("toPort", 0),
                        "cidrBlocks": [inputs.get("cidrIpv4")],
                        "ipv6CidrBlocks": [inputs.get("cidrIpv6")],
                    },
                )
            )
    return rules


def _covers(rule: dict, port: int) -> bool:
    if str(rule.get("protocol")) in ("-1", "all"):
        return True
    return int(rule.get("fromPort", 0)) <= port <= int(rule.get("toPort", 0))


def _sources(rule: dict) -> set[str]:
    return {c for c in (rule.get("cidrBlocks") or []) + (rule.get("ipv6CidrBlocks") or []) if c}


@pytest.mark.parametrize("stack", STACKS)
def test_no_ssh_from_anywhere(stack):
    allowed = set((stack_file(stack).get("gpu-cluster:network") or {}).get("sshAllowedCidrs", []))
    assert not allowed & ANYWHERE, f"Pulumi.{stack}.yaml: network.sshAllowedCidrs {allowed}"
    g = graph(stack)
    ssh_port = (stack_file(stack).get("gpu-cluster:ssh") or {}).get("port", 22)
    for resource, rule in _ingress_rules(g):
        if _covers(rule, ssh_port):
            assert not _sources(rule) & ANYWHERE, f"{resource.urn}: SSH open to the world: {rule}"


@pytest.mark.parametrize("stack", STACKS)
def test_kubelet_only_from_the_control_plane(stack):
    g = graph(stack)
    pool_groups = [
        g.named(f"{config(stack, 'clusterName')}-{p['name']}-nodes")
        for p in config(stack, "nodePools")
    ]
    for group in pool_groups:
        kubelet = [r for r in group.plain_inputs()["ingress"] if _covers(r, 10250)]
        assert len(kubelet) == 1, f"{group.urn}: kubelet rules {kubelet}"
        sources = _sources(kubelet[0])
        assert sources and all(s.endswith("/32") for s in sources), f"{group.urn}: {sources}"
        if stack == "prod":
            assert sources == {"10.20.1.10/32"}, f"{group.urn}: {sources}"
    for resource, rule in _ingress_rules(g):
        if _covers(rule, 10250):
            assert not _sources(rule) & ANYWHERE, f"{resource.urn}: kubelet open to the world"
    for node in node_names(stack):
        resource = g.named(node)
        groups = resource.plain_inputs()["vpcSecurityGroupIds"]
        assert len(groups) == 2, f"{resource.urn}: cluster + pool security groups, got {groups}"


def test_connections_use_the_bastion_in_prod():
    g = graph("prod")
    bastion = config("prod", "network")["bastion"]
    for node in node_names("prod"):
        for name in (f"{node}-wait-ready", f"{node}-join"):
            resource = step(g, name)
            connection = resource.plain_inputs()["connection"]
            assert connection["host"].startswith("10."), (
                f"{resource.urn}: private IP, got {connection}"
            )
            proxy = connection.get("proxy") or {}
            assert proxy.get("host") == bastion["host"], f"{resource.urn}: proxy {proxy}"
            assert connection["dialErrorLimit"] == DIAL_FOREVER, connection


@pytest.mark.parametrize("stack", ["dev", "staging"])
def test_connections_use_public_ips_without_a_bastion(stack):
    g = graph(stack)
    for node in node_names(stack):
        instance = g.named(node)
        assert instance.plain_inputs()["associatePublicIpAddress"] is True, f"{instance.urn}"
        resource = step(g, f"{node}-wait-ready")
        connection = resource.plain_inputs()["connection"]
        assert not connection.get("proxy"), f"{resource.urn}: no bastion in {stack}"
        assert not connection["host"].startswith("10."), f"{resource.urn}: public IP, {connection}"


# ---------------------------------------------------------------- outputs


@pytest.mark.parametrize("stack", STACKS)
def test_pool_and_node_outputs(stack):
    g = graph(stack)
    nodes = node_names(stack)
    for pool in g.of_type("gpu-cluster:index:GpuNodePool"):
        names = pool.outputs.get("nodeNames")
        assert names and all(n in nodes for n in names), f"{pool.urn}: nodeNames {names}"
    components = g.of_type(GPU_NODE)
    assert sorted(c.name for c in components) == sorted(f"{n}-node" for n in nodes), f"{stack}"
    for component in components:
        outputs = component.outputs
        assert f"{outputs.get('nodeName')}-node" == component.name, f"{component.urn}: {outputs}"
        assert str(outputs.get("instanceId", "")).startswith("i-"), f"{component.urn}: {outputs}"
        assert outputs.get("privateIp"), f"{component.urn}: {outputs}"


@pytest.mark.parametrize("stack", STACKS)
def test_a_node_is_at_most_15_resources_and_opens_no_control_plane_session(stack):
    """Issue 40's weight: counted from the registrations (tools.node_cost), with the roll and
    a node's removal through the API instead of two control-plane steps per node (14), plus
    the first contact's second phase, `<node>-host-key-switch` (decision 064: the pin it
    switches to is the connection the engine stores for every later step)."""
    from tools import node_cost

    g = graph(stack)
    for node in node_names(stack):
        cost = node_cost.cost(g, node)
        efa_interfaces = sum(1 for name in cost.names if "-efa-" in name)
        assert cost.resources - efa_interfaces <= 15, f"{node}: {cost.names}"
        assert cost.control_plane_steps == 0, f"{node}: {cost.names}"
