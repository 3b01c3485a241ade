"""ControlPlane on the real registered graph, both modes: `dev` is managed (the stack creates and
initializes the control plane), `prod` is existing (an SSH-reachable kubeadm control plane).

The assertions are on what the engine receives: dependencies, inputs (secret markers kept),
additional secret outputs and delete commands.
"""

from __future__ import annotations

import itertools
import re
from functools import cache

import pytest

from components.control_plane import API_PORT, ETCD_PORTS
from components.hosts import bundle
from components.hosts.rendering import available_scripts
from components.kube.ca_cert_hash import parse_ca_cert_hash
from components.settings.load import ConfigError
from tests.helpers import graphs as shared
from tools.harness.graph import Graph, Resource, Secret, plain_strings, secret_paths, unwrap
from tools.harness.mocks import CA_CERT_HASH, COMMAND_STDOUT, fake_id, fake_ip
from tools.harness.stacks import run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
COMMAND = "command:remote:Command"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
K8S_PROVIDER = "pulumi:providers:kubernetes"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
MANAGED_CHAIN = (
    "control-plane",
    "wait-ready",
    "runtime",
    "upgrade",
    "kube-tools",
    "init",
    "cni",
    "certificates",
    "kubeconfig",
)
KUBECONFIG_LEAK_MARKER = "RkFLRS1URVNULUFETUlOLUtFWQ"  # base64 of "FAKE-TEST-ADMIN-KEY"


@cache
def stack_graph(stack: str) -> Graph:
    return shared.stack_graph(stack)


def elastic_ip(graph: Graph, cluster: str) -> str:
    """The stable public address of the managed control plane (its Elastic IP)."""
    address = graph.named(f"{cluster}-control-plane-ip")
    machine = graph.named(f"{cluster}-control-plane")
    assert address.property_dependencies.get("instance") == {machine.urn}, (
        f"{address.urn}: not associated with {machine.urn}"
    )
    return fake_ip("203.0", address.name)


def stdin_of(resource: Resource) -> str:
    return unwrap(resource.inputs["stdin"])


def param(resource: Resource, name: str) -> str:
    """The value a rendered step script assigns to NAME (inputs are NAME='value' lines)."""
    for line in stdin_of(resource).splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].strip("'")
    raise AssertionError(f"{resource.urn}: no input {name} in the rendered script")


def script_of(resource: Resource) -> str:
    """Which components/hosts/scripts file a step runs: the program its stdin sources, known by
    its digest."""
    programs = {bundle.digest(script): script for script in available_scripts()}
    digest = re.search(r"^source \S+/([0-9a-f]{64})\.sh$", stdin_of(resource), re.M)
    assert digest, f"{resource.urn}: sources no program by digest"
    return programs[digest.group(1)]


def nodes_of(graph: Graph) -> list[str]:
    return sorted(
        r.name
        for r in graph.of_type(INSTANCE)
        if "gpu-cluster:role" not in r.inputs.get("tags", {})
    )


def host_of(resource: Resource) -> str:
    return unwrap(resource.inputs["connection"])["host"]


# ------------------------------------------------------------------ managed (dev)


def test_managed_chain_runs_in_order_on_the_control_plane_machine():
    graph = stack_graph("dev")
    cluster = "dev-gpu"
    steps = [graph.named(f"{cluster}-{step}") for step in MANAGED_CHAIN]
    assert steps[0].type == INSTANCE, f"{steps[0].urn}: the control plane is not an EC2 instance"
    for before, after in itertools.pairwise(steps):
        assert before.urn in graph.direct_dependencies(after), (
            f"{after.urn}: does not wait directly for {before.urn}"
        )
    expected_scripts = {
        "wait-ready": "wait-ready.sh",
        "runtime": "install-runtime.sh",
        "upgrade": "upgrade-control-plane.sh",
        "kube-tools": "install-kube-tools.sh",
        "init": "init-control-plane.sh",
        "cni": "install-cni.sh",
        "certificates": "renew-certificates.sh",
        "kubeconfig": "read-kubeconfig.sh",
    }
    for step, script in expected_scripts.items():
        resource = graph.named(f"{cluster}-{step}")
        assert script_of(resource) == script, f"{resource.urn}: runs {script_of(resource)}"
    public_ip = elastic_ip(graph, cluster)
    for step in MANAGED_CHAIN[1:]:
        resource = graph.named(f"{cluster}-{step}")
        assert host_of(resource) == public_ip, f"{resource.urn}: not run on the control plane"


def test_managed_machine_reuses_the_node_scripts_without_the_gpu_toolkit():
    graph = stack_graph("dev")
    runtime = graph.named("dev-gpu-runtime")
    assert param(runtime, "WITH_NVIDIA_TOOLKIT") == "false", f"{runtime.urn}: installs the toolkit"
    kube_tools = graph.named("dev-gpu-kube-tools")
    assert param(kube_tools, "KUBERNETES_MINOR") == "1.35", f"{kube_tools.urn}: wrong minor"
    node_tools = graph.named("dev-gpu-a10g-0-kube-tools")
    assert script_of(node_tools) == script_of(kube_tools), (
        f"{kube_tools.urn}: not the same kube-tools script as {node_tools.urn}"
    )


def test_managed_init_then_cni_then_kubeconfig_before_any_join():
    graph = stack_graph("dev")
    init, cni, kubeconfig = (graph.named(f"dev-gpu-{s}") for s in ("init", "cni", "kubeconfig"))
    assert graph.depends_on(cni, init), f"{cni.urn}: CNI does not wait for kubeadm init"
    assert graph.depends_on(kubeconfig, cni), f"{kubeconfig.urn}: kubeconfig before the CNI"
    for node in nodes_of(graph):
        for step in ("join-token", "join"):
            resource = graph.named(f"{node}-{step}")
            for before in (init, cni, kubeconfig):
                assert graph.depends_on(resource, before), (
                    f"{resource.urn}: does not wait for {before.name}"
                )


def test_managed_init_configuration_inputs():
    graph = stack_graph("dev")
    machine = graph.named("dev-gpu-control-plane")
    public_ip, private_ip = elastic_ip(graph, "dev-gpu"), fake_ip("10.42", machine.name)
    init = graph.named("dev-gpu-init")
    assert param(init, "CLUSTER_NAME") == "dev-gpu", f"{init.urn}: cluster name"
    assert param(init, "KUBERNETES_MINOR") == "1.35", f"{init.urn}: minor"
    assert param(init, "POD_SUBNET") == "10.244.0.0/16", f"{init.urn}: pod subnet"
    assert param(init, "SERVICE_SUBNET") == "10.96.0.0/12", f"{init.urn}: service subnet"
    assert param(init, "CONTROL_PLANE_ENDPOINT") == f"{private_ip}:{API_PORT}", f"{init.urn}"
    assert param(init, "ADVERTISE_ADDRESS") == private_ip, f"{init.urn}: advertise address"
    sans = param(init, "CERT_SANS").split(",")
    assert public_ip in sans and private_ip in sans, f"{init.urn}: cert SANs {sans}"
    cni = graph.named("dev-gpu-cni")
    # The pin itself is compared with the README and the script in tests/test_pins.py.
    assert re.fullmatch(r"v\d+\.\d+\.\d+", param(cni, "FLANNEL_VERSION")), f"{cni.urn}: unpinned"
    assert param(cni, "POD_SUBNET") == param(init, "POD_SUBNET"), f"{cni.urn}: pod CIDR differs"
    assert param(cni, "NODE_NAME") == "dev-gpu-control-plane", f"{cni.urn}: waits for another node"


def test_managed_pod_and_service_cidrs_come_from_config_and_update_init_not_the_machine():
    base = stack_graph("dev")
    changed = run_program(
        "dev",
        config={
            "controlPlane": {
                "mode": "managed",
                "podCidr": "10.200.0.0/16",
                "apiAllowedCidrs": ["203.0.113.0/24"],
            }
        },
    )
    init = changed.named("dev-gpu-init")
    assert param(init, "POD_SUBNET") == "10.200.0.0/16", f"{init.urn}: pod subnet from config"
    assert param(changed.named("dev-gpu-cni"), "POD_SUBNET") == "10.200.0.0/16"
    for name in ("dev-gpu-init", "dev-gpu-cni"):
        before, after = base.named(name), changed.named(name)
        # An update (stdin) that re-runs the idempotent script, never a replacement (triggers).
        assert unwrap(before.inputs["stdin"]) != unwrap(after.inputs["stdin"]), f"{after.urn}"
        assert unwrap(before.inputs["triggers"]) == unwrap(after.inputs["triggers"]), after.urn
    for name in ("dev-gpu-control-plane", "dev-gpu-runtime", "dev-gpu-kube-tools"):
        before, after = base.named(name), changed.named(name)
        assert unwrap(before.inputs) == unwrap(after.inputs), f"{after.urn}: changed by podCidr"


def test_managed_api_security_group_is_the_vpc_and_the_allowed_ranges_only():
    graph = stack_graph("dev")
    group = graph.named("dev-gpu-api")
    rules = unwrap(group.inputs["ingress"])
    # etcd shares this group, open to the group itself only (decision 038): no address range
    # reaches it, the control plane's own machines do.
    etcd = [r for r in rules if (r["fromPort"], r["toPort"]) == ETCD_PORTS]
    assert len(etcd) == 1 and etcd[0]["protocol"] == "tcp" and etcd[0].get("self") is True, (
        f"{group.urn}: etcd not from the control plane's own group: {etcd}"
    )
    assert not etcd[0].get("cidrBlocks") and not etcd[0].get("securityGroups"), (
        f"{group.urn}: etcd open to more than the control plane: {etcd}"
    )
    api = [r for r in rules if r not in etcd]
    assert {(r["fromPort"], r["toPort"], r["protocol"]) for r in api} == {(6443, 6443, "tcp")}, (
        f"{group.urn}: opens more than the API port and etcd: {rules}"
    )
    sources = sorted(c for r in api for c in r["cidrBlocks"])
    assert sources == ["10.42.0.0/16", "203.0.113.0/24"], f"{group.urn}: API sources {sources}"
    machine = graph.named("dev-gpu-control-plane")
    groups = unwrap(machine.inputs["vpcSecurityGroupIds"])
    cluster_group = graph.named("network-cluster")
    assert len(groups) == 2, f"{machine.urn}: security groups {groups}"
    assert group.urn in graph.direct_dependencies(machine), f"{machine.urn}: not in the API group"
    assert cluster_group.urn in graph.direct_dependencies(machine), (
        f"{machine.urn}: not in the cluster group (SSH, CNI)"
    )


def test_managed_api_without_allowed_ranges_is_vpc_only():
    """Behind a bastion the operator works from inside the VPC: no outside range is needed."""
    graph = run_program("prod", config={"controlPlane": {"mode": "managed", "apiAllowedCidrs": []}})
    group = graph.named("prod-gpu-api")
    # The etcd rule admits the group itself, no range (decision 038).
    sources = [c for r in unwrap(group.inputs["ingress"]) for c in r.get("cidrBlocks", [])]
    assert sources == ["10.0.0.0/16"], f"{group.urn}: API open to {sources}"


def test_managed_api_reachable_from_nowhere_outside_is_a_config_error():
    with pytest.raises(ConfigError, match=r"controlPlane\.apiAllowedCidrs"):
        run_program("dev", config={"controlPlane": {"mode": "managed", "apiAllowedCidrs": []}})


def test_managed_machine_is_hardened():
    graph = stack_graph("dev")
    machine = graph.named("dev-gpu-control-plane")
    inputs = unwrap(machine.inputs)
    metadata = inputs["metadataOptions"]
    assert metadata["httpTokens"] == "required", f"{machine.urn}: IMDSv1 allowed"
    assert metadata["httpPutResponseHopLimit"] == 1, f"{machine.urn}: hop limit {metadata}"
    root = inputs["rootBlockDevice"]
    assert root["encrypted"] is True and root["volumeType"] == "gp3", f"{machine.urn}: {root}"
    assert root["volumeSize"] == 50, f"{machine.urn}: root volume {root}"
    assert inputs["instanceType"] == "m7i.large", f"{machine.urn}: instance type"
    (first_subnet,) = graph.find(
        lambda r: r.type == "aws:ec2/subnet:Subnet" and r.name == "network-public-0"
    )
    assert first_subnet.urn in graph.direct_dependencies(machine), f"{machine.urn}: subnet"
    key = graph.named("dev-gpu-control-plane-key")
    assert key.urn in graph.direct_dependencies(machine), f"{machine.urn}: no key pair"
    ami = inputs["ami"]
    assert ami.startswith("ami-"), f"{machine.urn}: AMI {ami}"


def test_managed_configured_ami_is_used_as_given():
    graph = run_program(
        "dev",
        config={
            "controlPlane": {
                "mode": "managed",
                "amiId": "ami-0123456789abcdef0",
                "apiAllowedCidrs": ["203.0.113.0/24"],
            }
        },
    )
    machine = graph.named("dev-gpu-control-plane")
    assert machine.inputs["ami"] == "ami-0123456789abcdef0", f"{machine.urn}: AMI not as given"


def test_managed_kubeconfig_address_follows_how_the_operator_connects():
    graph = stack_graph("dev")
    step = graph.named("dev-gpu-kubeconfig")
    public_ip = elastic_ip(graph, "dev-gpu")
    assert param(step, "API_SERVER") == f"https://{public_ip}:{API_PORT}", f"{step.urn}"
    # Behind a bastion (existing VPC with NAT) everything goes to the private address.
    relayed = run_program(
        "dev",
        config={
            "network": {
                "create": False,
                "vpcId": "vpc-0a1b2c3d4e5f60718",
                "subnetIds": ["subnet-0a1b2c3d4e5f60711"],
                # A bastion the stack did not create: its host key and, named by a public
                # address, its security group are required (decisions 038, 041).
                "bastion": {
                    "host": "198.51.100.7",
                    "hostKey": _prod_bastion()["hostKey"],
                    "securityGroupId": _prod_bastion()["securityGroupId"],
                },
            }
        },
    )
    machine = relayed.named("dev-gpu-control-plane")
    private_ip = fake_ip("10.42", machine.name)
    step = relayed.named("dev-gpu-kubeconfig")
    assert param(step, "API_SERVER") == f"https://{private_ip}:{API_PORT}", f"{step.urn}"
    assert host_of(step) == private_ip, f"{step.urn}: SSH not to the private address"
    assert unwrap(step.inputs["connection"])["proxy"]["host"] == "198.51.100.7", (
        f"{step.urn}: not through the bastion"
    )


def test_managed_kubelet_clients_are_the_control_plane_address():
    graph = stack_graph("dev")
    machine = graph.named("dev-gpu-control-plane")
    group = graph.named("dev-gpu-a10g-nodes")
    sources = [c for r in unwrap(group.inputs["ingress"]) for c in r["cidrBlocks"]]
    assert sources == [f"{fake_ip('10.42', machine.name)}/32"], f"{group.urn}: {sources}"


# ------------------------------------------------------------------ existing (prod)


def test_existing_mode_creates_no_machine_and_checks_skew_before_any_node():
    graph = stack_graph("prod")
    assert not graph.find(lambda r: r.name == "prod-gpu-control-plane"), (
        "prod: existing mode created a control-plane machine"
    )
    assert not graph.find(lambda r: r.name in ("prod-gpu-init", "prod-gpu-cni")), (
        "prod: existing mode runs kubeadm init or installs a CNI"
    )
    skew = graph.named("prod-gpu-version-skew")
    assert script_of(skew) == "check-version-skew.sh", f"{skew.urn}: runs {script_of(skew)}"
    assert param(skew, "KUBERNETES_MINOR") == "1.34", f"{skew.urn}: checks another minor"
    kubeconfig = graph.named("prod-gpu-kubeconfig")
    assert graph.depends_on(kubeconfig, skew), f"{kubeconfig.urn}: before the skew check"
    assert param(kubeconfig, "API_SERVER") == "https://10.20.1.10:6443", f"{kubeconfig.urn}"
    nodes = nodes_of(graph)
    assert len(nodes) == 8, f"prod: nodes {nodes}"
    for node in nodes:
        for step in ("wait-ready", "driver", "join-token", "join"):
            resource = graph.named(f"{node}-{step}")
            if step in ("join-token", "join"):
                assert graph.depends_on(resource, skew), f"{resource.urn}: before the skew check"
                assert graph.depends_on(resource, kubeconfig), f"{resource.urn}: before kubeconfig"


def test_existing_mode_reaches_the_host_through_the_bastion():
    graph = stack_graph("prod")
    for name in ("prod-gpu-version-skew", "prod-gpu-kubeconfig", "prod-gpu-operator-kubeconfig"):
        step = graph.named(name)
        connection = unwrap(step.inputs["connection"])
        assert connection["host"] == "10.20.1.10", f"{step.urn}: SSH to {connection['host']}"
        assert connection["user"] == "ubuntu", f"{step.urn}: user {connection['user']}"
        assert connection["proxy"]["host"] == "198.51.100.7", f"{step.urn}: no bastion"
        assert connection["dialErrorLimit"] == -1, f"{step.urn}: gives up dialling"


def test_existing_mode_user_override_and_kubelet_clients():
    graph = run_program(
        "prod",
        config={
            "controlPlane": {
                "mode": "existing",
                "host": "10.20.1.10",
                "endpoint": "10.20.1.10:6443",
                "user": "admin",
                "hostKey": _prod_host_key(),
            }
        },
    )
    step = graph.named("prod-gpu-version-skew")
    assert unwrap(step.inputs["connection"])["user"] == "admin", f"{step.urn}: user not used"
    group = graph.named("prod-gpu-a10g-nodes")
    sources = [c for r in unwrap(group.inputs["ingress"]) for c in r["cidrBlocks"]]
    assert sources == ["10.20.1.10/32"], f"{group.urn}: kubelet open to {sources}"
    # A DNS name for the host: the kubelet port is open to the VPC instead.
    named = run_program(
        "prod",
        config={
            "controlPlane": {
                "mode": "existing",
                "host": "cp.internal.example",
                "endpoint": "api.internal.example:6443",
                "hostKey": _prod_host_key(),
            }
        },
    )
    group = named.named("prod-gpu-a10g-nodes")
    sources = [c for r in unwrap(group.inputs["ingress"]) for c in r["cidrBlocks"]]
    assert sources == ["10.0.0.0/16"], f"{group.urn}: kubelet open to {sources}"
    join = named.named("prod-gpu-a10g-0-join")
    assert param(join, "API_ENDPOINT") == "api.internal.example:6443", f"{join.urn}: endpoint"


def test_existing_mode_kubelet_clients_prefer_the_private_address():
    """SSH may go to a public address; kubelets are called from the VPC-side address."""
    graph = run_program(
        "prod",
        config={
            "controlPlane": {
                "mode": "existing",
                "host": "198.51.100.20",
                "endpoint": "10.20.1.10:6443",
                "hostKey": _prod_host_key(),
            }
        },
    )
    group = graph.named("prod-gpu-a10g-nodes")
    sources = [c for r in unwrap(group.inputs["ingress"]) for c in r["cidrBlocks"]]
    assert sources == ["10.20.1.10/32"], f"{group.urn}: kubelet open to {sources}"


def test_managed_address_survives_a_stop_and_start():
    """The address in the certificate and the kubeconfig is an Elastic IP, not the instance's
    ephemeral public IP, so stopping and starting the machine keeps both valid."""
    graph = stack_graph("dev")
    public_ip = elastic_ip(graph, "dev-gpu")
    assert public_ip != fake_ip("198.51", "dev-gpu-control-plane")
    assert public_ip in param(graph.named("dev-gpu-init"), "CERT_SANS").split(",")
    relayed = run_program(
        "prod",
        config={
            "controlPlane": {"mode": "managed"},
            "network": {**_prod_network(), "bastion": None},
        },
    )
    assert not relayed.of_type("aws:ec2/eip:Eip"), "private machines got an Elastic IP"


def _prod_network() -> dict:
    from tools.harness.stacks import stack_file

    return dict(stack_file("prod")["gpu-cluster:network"])


def _prod_bastion() -> dict:
    return dict(_prod_network()["bastion"])


def _prod_host_key() -> str:
    """The existing control plane's host key from prod's stack file: required in config for a
    host the stack did not create (decision 041)."""
    return stack_file("prod")["gpu-cluster:controlPlane"]["hostKey"]


def test_existing_mode_with_a_newer_kubelet_still_registers_the_skew_check_first():
    """The skew check is a host step (the API server's version is only known there): a newer
    kubernetesVersion reaches it, and no node step runs before it."""
    graph = run_program("prod", config={"kubernetesVersion": "1.35"})
    skew = graph.named("prod-gpu-version-skew")
    assert param(skew, "KUBERNETES_MINOR") == "1.35", f"{skew.urn}: checks another minor"
    for node in nodes_of(graph):
        token = graph.named(f"{node}-join-token")
        assert graph.depends_on(token, skew), f"{token.urn}: made before the skew check"


# ------------------------------------------------------------------ both modes


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_provider_is_built_from_the_secret_kubeconfig(stack):
    graph = stack_graph(stack)
    cluster = f"{stack}-gpu"
    provider = graph.named(f"{cluster}-k8s")
    assert provider.type == K8S_PROVIDER, f"{provider.urn}: type {provider.type}"
    kubeconfig = provider.inputs["kubeconfig"]
    assert isinstance(kubeconfig, Secret), f"{provider.urn}: kubeconfig is not a secret input"
    step = graph.named(f"{cluster}-kubeconfig")
    read = _Args(step.name)
    read.inputs = {"stdin": unwrap(step.inputs["stdin"])}
    expected = COMMAND_STDOUT["-kubeconfig"](read)
    assert kubeconfig.value == expected, f"{provider.urn}: kubeconfig is not the step's stdout"
    assert step.urn in graph.direct_dependencies(provider), f"{provider.urn}: not after {step.urn}"
    for daemonset in graph.of_type(DAEMONSET):
        assert daemonset.provider_urn == provider.urn, f"{daemonset.urn}: another provider"


def test_provider_identifies_the_cluster_by_its_machine_or_endpoint():
    """clusterIdentifier decides when the provider (and every object it manages) is replaced:
    the control-plane machine (managed) or the endpoint (existing), never the kubeconfig text."""
    dev = stack_graph("dev")
    (machine,) = [
        r for r in dev.of_type("aws:ec2/instance:Instance") if r.name == "dev-gpu-control-plane"
    ]
    provider = dev.named("dev-gpu-k8s")
    # The mocks give each instance the id fake_id("i-", name).
    assert provider.inputs["clusterIdentifier"] == f"dev-gpu/{fake_id('i-', machine.name)}", (
        f"{provider.urn}: clusterIdentifier {provider.inputs.get('clusterIdentifier')!r}"
    )
    assert dev.depends_on(provider, machine), f"{provider.urn}: does not wait for {machine.urn}"
    prod = stack_graph("prod")
    endpoint = stack_file("prod")["gpu-cluster:controlPlane"]["endpoint"]
    provider = prod.named("prod-gpu-k8s")
    assert provider.inputs["clusterIdentifier"] == f"prod-gpu/{endpoint}", provider.inputs
    rerun = run_program("dev")
    assert (
        rerun.named("dev-gpu-k8s").inputs["clusterIdentifier"]
        == dev.named("dev-gpu-k8s").inputs["clusterIdentifier"]
    ), "clusterIdentifier differs between two runs of the same config"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_exported_kubeconfig_is_the_operators_identity_not_admin(stack):
    graph = stack_graph(stack)
    cluster = f"{stack}-gpu"
    step = graph.named(f"{cluster}-operator-kubeconfig")
    assert step.additional_secret_outputs and "stdout" in step.additional_secret_outputs
    assert param(step, "CLIENT_NAME") == f"{cluster}-operator"
    assert param(step, "GROUP") == "gpu-cluster:operators"
    assert param(step, "VALIDITY_HOURS") == "168"
    assert script_of(step) == "user-kubeconfig.sh", script_of(step)
    assert "kubeadm kubeconfig user" in bundle.program(script_of(step))
    admin = graph.named(f"{cluster}-kubeconfig")
    assert param(step, "API_SERVER") == param(admin, "API_SERVER"), "another address"
    exported = graph.outputs["kubeconfig"]
    assert isinstance(exported, Secret), "the exported kubeconfig is not a secret"
    assert exported.value == COMMAND_STDOUT["-kubeconfig"](_Args(step.name)), (
        "the stack exports another kubeconfig than the operator step's"
    )
    binding = graph.named(f"{cluster}-operators")
    inputs = unwrap(binding.inputs)
    assert inputs["roleRef"]["name"] == "cluster-admin", inputs
    assert inputs["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gpu-cluster:operators"}
    ], inputs
    assert binding.provider_urn == graph.named(f"{cluster}-k8s").urn


def test_operator_group_role_and_lifetime_come_from_config():
    graph = run_program(
        "dev",
        config={"kubeconfig": {"group": "ml-admins", "clusterRole": "view", "validityHours": 8}},
    )
    step = graph.named("dev-gpu-operator-kubeconfig")
    assert (param(step, "GROUP"), param(step, "VALIDITY_HOURS")) == ("ml-admins", "8")
    binding = unwrap(graph.named("dev-gpu-operators").inputs)
    assert binding["roleRef"]["name"] == "view" and binding["subjects"][0]["name"] == "ml-admins"


def test_operator_group_must_not_be_an_admin_group_spelled_oddly():
    with pytest.raises(ConfigError) as caught:
        run_program("dev", config={"kubeconfig": {"group": "gpu\u0661:ops"}})
    assert [p.key for p in caught.value.problems] == ["gpu-cluster:kubeconfig.group"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_plain_secret_anywhere(stack):
    graph = stack_graph(stack)
    cluster = f"{stack}-gpu"
    for name in (f"{cluster}-kubeconfig", f"{cluster}-operator-kubeconfig"):
        step = graph.named(name)
        assert set(step.additional_secret_outputs) >= {"stdout", "stderr"}, (
            f"{step.urn}: output not secret"
        )
        assert step.inputs.get("logging") == "none", f"{step.urn}: output logged"
    secrets = []
    for node in nodes_of(graph):
        record = graph.named(f"{node}-join-token")
        held = record.inputs["input"]
        assert isinstance(held["tokenSecret"], Secret), f"{record.urn}: token in plain"
        secrets.append(unwrap(held)["tokenSecret"])
    for resource in graph:
        for text in [*plain_strings(resource.inputs), *plain_strings(resource.outputs)]:
            assert KUBECONFIG_LEAK_MARKER not in text, f"{resource.urn}: kubeconfig in plain text"
            for secret in secrets:
                assert secret not in text, f"{resource.urn}: a join token in plain text"
    for text in plain_strings(graph.outputs):
        assert KUBECONFIG_LEAK_MARKER not in text, f"{stack}: kubeconfig in a plain stack output"
    assert isinstance(graph.outputs["kubeconfig"], Secret), f"{stack}: kubeconfig output plain"
    component = graph.named(cluster)
    assert isinstance(component.outputs["kubeconfig"], Secret), (
        f"{component.urn}: kubeconfig registered as a plain output"
    )


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_node_joins_with_its_own_token_through_the_api_and_pins_the_ca(stack):
    """No session on the control plane mints a token: the program mints it through the API,
    from its token record's hook (tests/test_join_token.py has its mint, lifetime and day two).
    The join pins the CA hash read-kubeconfig.sh printed after the kubeconfig, and joins the
    endpoint."""
    graph = stack_graph(stack)
    kubeconfig = graph.named(f"{stack}-gpu-kubeconfig")
    assert script_of(kubeconfig) == "read-kubeconfig.sh", f"{kubeconfig.urn}"
    for node in nodes_of(graph):
        token = graph.named(f"{node}-join-token")
        assert token.type == "pulumi:index:Stash", f"{token.urn}: {token.type}"
        assert token.hooks == {"before_create": [f"{token.name}-mint"]}, token.urn
        join = graph.named(f"{node}-join")
        data = unwrap(token.inputs["input"])
        assert f"JOIN_TOKEN={data['tokenId']}.{data['tokenSecret']}" in stdin_of(join), (
            f"{join.urn}: not its token"
        )
        assert param(join, "CA_CERT_HASH") == CA_CERT_HASH, f"{join.urn}: CA hash"
        assert param(join, "API_ENDPOINT") == graph.outputs["endpoint"], f"{join.urn}: endpoint"
        assert graph.depends_on(join, kubeconfig), f"{join.urn}: before the CA hash is known"
        assert token.urn in graph.direct_dependencies(join), f"{join.urn}: not after {token.urn}"
        # The cluster is the join's identity: a new endpoint or CA (a new cluster) replaces
        # it; the values are plain, so they can be compared in a preview.
        triggers = join.inputs["triggers"]
        assert triggers[1:] == [graph.outputs["endpoint"], CA_CERT_HASH], f"{join.urn}: {triggers}"
        assert not any(isinstance(t, Secret) for t in triggers), f"{join.urn}: secret triggers"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_node_has_no_step_on_the_control_plane(stack):
    """A node's Kubernetes side goes through the API (token, readiness, capacity, labels,
    taints, its roll and its removal): sshd on the control plane serves no session per node."""
    graph = stack_graph(stack)
    control_plane = host_of(graph.named(f"{stack}-gpu-kubeconfig"))
    for node in nodes_of(graph):
        on_control_plane = sorted(
            r.name
            for r in graph.of_type(COMMAND)
            if r.name.startswith(f"{node}-") and host_of(r) == control_plane
        )
        assert on_control_plane == [], on_control_plane


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_in_service_continues_the_drain_and_node_ready_and_dials_nothing(stack):
    """`<node>-in-service` takes over `<node>-drain` (and the `<node>-node-ready` it continued,
    decision 027) by alias, keeps its stored triggers (ignored: a changed trigger would replace
    the state and run its stored drain) and runs no command, so the update that stores it
    without the stored `delete` dials nothing (decision 058)."""
    graph = stack_graph(stack)
    for node in nodes_of(graph):
        taken = graph.named(f"{node}-in-service")
        names = [alias.get("name") for alias in taken.aliases]
        assert names == [f"{node}-drain", f"{node}-node-ready"], taken.aliases
        assert taken.ignore_changes == ["triggers"], taken.urn
        assert not {"create", "update", "delete", "triggers"} & taken.inputs.keys(), taken.urn
        assert taken.type == COMMAND, "an alias continues a resource of the same type only"


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_stack_outputs_come_from_the_control_plane(stack):
    graph = run_program(stack) if stack == "staging" else stack_graph(stack)
    settings = _settings(graph, stack)
    outputs = graph.outputs
    if stack == "prod":
        assert outputs["endpoint"] == "10.20.1.10:6443", f"{stack}: endpoint {outputs['endpoint']}"
    else:
        machine = graph.named(f"{settings['cluster']}-control-plane")
        expected = f"{fake_ip('10.42', machine.name)}:{API_PORT}"
        assert outputs["endpoint"] == expected, f"{stack}: endpoint {outputs['endpoint']}"
    assert outputs["kubernetesVersion"] == settings["version"], f"{stack}: version output"
    pools = outputs["nodePools"]
    assert sorted(n for names in pools.values() for n in names) == nodes_of(graph), (
        f"{stack}: nodePools output {pools}"
    )
    assert secret_paths(outputs["kubeconfig"]) == ["."], f"{stack}: kubeconfig output not secret"


def test_the_ca_hash_is_read_from_the_kubeconfig_and_an_error_never_shows_it():
    kubeconfig = COMMAND_STDOUT["-kubeconfig"](_Args("dev-gpu-kubeconfig"))
    assert parse_ca_cert_hash(kubeconfig) == CA_CERT_HASH
    assert parse_ca_cert_hash(f"{kubeconfig}# ca-cert-hash: sha256:{'c' * 64}\n") == (
        f"sha256:{'c' * 64}"
    ), "not the last line read-kubeconfig.sh wrote"
    without = kubeconfig.replace(f"# ca-cert-hash: {CA_CERT_HASH}\n", "")
    for bad in (without, f"{without}# ca-cert-hash: sha256:abc\n"):
        with pytest.raises(ValueError) as caught:
            parse_ca_cert_hash(bad)
        assert "client-key-data" not in str(caught.value), "the kubeconfig is in the error"
        assert KUBECONFIG_LEAK_MARKER not in str(caught.value)


# ------------------------------------------------------------------ helpers


class _Args:
    """The part of MockResourceArgs the stdout makers read."""

    def __init__(self, name: str):
        self.name = name
        self.inputs: dict = {}


def _settings(graph: Graph, stack: str) -> dict[str, str]:
    config = stack_file(stack)
    return {
        "cluster": config["gpu-cluster:clusterName"],
        "version": str(config["gpu-cluster:kubernetesVersion"]),
    }
