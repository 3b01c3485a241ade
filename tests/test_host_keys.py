"""SSH host keys on the registered graph: each machine boots with a key the program generated
(cloud-init user data, secret), and every host step's connection pins the key of the machine it
dials; the bastion and an existing control plane are pinned from config, machines created before
host keys existed from `hostKeys`.

What is pinned is checked against what the machine boots with: the user data is parsed as
cloud-init parses it (YAML), and its private key is read with `cryptography`, so the public key a
connection passes is the one the installed private key really has.
"""

from __future__ import annotations

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from components.hosts import host_keys
from components.hosts.host_keys import UnpinnedHost
from tests.helpers import graphs as shared
from tools.harness import mocks
from tools.harness.graph import Graph, Resource, Secret, plain_strings, unwrap
from tools.harness.mocks import fake_id, fake_ip
from tools.harness.stacks import STACKS, load_stack_settings, run_program, stack_file

INSTANCE = "aws:ec2/instance:Instance"
EIP = "aws:ec2/eip:Eip"
PRIVATE_KEY = "tls:index/privateKey:PrivateKey"
COMMAND = "command:remote:Command"
# Real keys (ssh-keygen -t ed25519 / ecdsa), used as operator-supplied host keys.
BASTION_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgQhqhz7570cVflJzFU7G+rWj7+er6oB85ewHM+R5QD"
OLD_MACHINE_KEY = mocks.ed25519_key("a machine of an earlier release")["publicKeyOpenssh"].strip()


@pytest.fixture(scope="module", params=STACKS)
def stack_graph(request) -> tuple[str, Graph]:
    return request.param, shared.stack_graph(request.param)


def boot_config(instance: Resource) -> dict:
    """The instance's user data as cloud-init reads it: a `#cloud-config` YAML document."""
    assert isinstance(instance.inputs.get("userData"), Secret), (
        f"{instance.urn}: userData holds the private host key and must be a secret input"
    )
    text = unwrap(instance.inputs["userData"])
    assert text.startswith("#cloud-config\n"), f"{instance.urn}: not a cloud-config"
    return yaml.safe_load(text)


def installed_public_key(instance: Resource) -> str:
    """The public half of the private host key the instance boots with, derived from it."""
    keys = boot_config(instance)["ssh_keys"]
    private = serialization.load_ssh_private_key(keys["ed25519_private"].encode(), None)
    derived = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert derived.decode() == keys["ed25519_public"], f"{instance.urn}: key halves differ"
    return derived.decode()


def machines_by_address(graph: Graph) -> dict[str, Resource]:
    """Every address a step may dial (public, private, Elastic IP) -> the instance behind it."""
    instances = {r.name: r for r in graph.of_type(INSTANCE)}
    found = {}
    for name, instance in instances.items():
        found[fake_ip("198.51", name)] = instance
        found[fake_ip("10.42", name)] = instance
    for eip in graph.of_type(EIP):
        found[fake_ip("203.0", eip.name)] = instances[eip.name.removesuffix("-ip")]
    return found


def connection(command: Resource) -> dict:
    return unwrap(command.inputs["connection"])


def first_keys(graph: Graph, machine: str) -> list[str]:
    """The keys the first contact with `machine` accepts (its `<machine>-host-key-rotation`)."""
    rotation = graph.named(f"{machine}-host-key-rotation")
    return mocks.local_inputs(unwrap(rotation.inputs["stdin"]))[0]["HOST_KEY"]


def rotated_key(machine: str) -> str:
    """What the mocks answer as the host's new key: every later step pins it."""
    return mocks.ed25519_key(f"{machine}-host-key-rotation rotated")["publicKeyOpenssh"].strip()


def test_every_connection_pins_the_key_its_machine_boots_with(stack_graph):
    stack, graph = stack_graph
    settings = load_stack_settings(stack)
    machines = machines_by_address(graph)
    commands = graph.of_type(COMMAND)
    assert commands, stack
    for command in commands:
        conn = connection(command)
        if conn["host"] in machines:
            machine = machines[conn["host"]]
            # The boot key is checked once, by the rotation; every step pins the new key.
            assert first_keys(graph, machine.name) == [installed_public_key(machine).strip()]
            assert conn.get("hostKey", "").strip() == rotated_key(machine.name), (
                f"{command.urn}: dials {machine.name} without pinning its rotated key"
            )
        else:  # the existing control plane: the operator's host
            assert conn["host"] == settings.control_plane.host, f"{command.urn}: unknown host"
            assert conn.get("hostKey") == settings.control_plane.host_key, command.urn
        bastion = settings.network.bastion
        if bastion is not None:
            assert conn["proxy"]["host"] == bastion.host, command.urn
            assert conn["proxy"].get("hostKey") == bastion.host_key, command.urn


def test_each_machine_boots_with_its_own_key_and_only_it(stack_graph):
    stack, graph = stack_graph
    instances = graph.of_type(INSTANCE)
    seen: dict[str, str] = {}
    for instance in instances:
        config = boot_config(instance)
        # cloud-init cc_ssh: ssh_deletekeys removes the image's keys; with ssh_keys given it
        # writes those and generates none.
        assert config["ssh_deletekeys"] is True, instance.urn
        assert config["ssh_genkeytypes"] == [], instance.urn
        assert set(config["ssh_keys"]) == {"ed25519_private", "ed25519_public"}, instance.urn
        public_key = installed_public_key(instance)
        assert public_key not in seen, (
            f"{instance.name} shares its host key with {seen.get(public_key)}"
        )
        seen[public_key] = instance.name
        # A user-data change stops and starts the machine: ignored after create, and the
        # provider's stored copy (a hash of the secret) is a secret output.
        assert "userData" in instance.ignore_changes, instance.urn
        assert "userData" in instance.additional_secret_outputs, instance.urn
    # The two-node EFA check has keys of its own (its pods' SSH), under its component.
    keys = {
        r.name
        for r in graph.of_type(PRIVATE_KEY)
        if "gpu-cluster:index:NcclEfaValidation" not in (r.parent or "")
    }
    assert keys == {f"{i.name}-host-key" for i in instances}, stack


def test_an_efa_pool_checked_across_two_nodes_keeps_one_host_key_per_machine():
    """The two-node EFA check brings SSH keys for its pods; they are not machine host keys, no
    machine boots with them, and no step dials with them."""
    pool = {"name": "h100", "instanceType": "p5.48xlarge", "count": 2, "efa": True}
    graph = run_program("prod", config={"nodePools": [pool]})
    instances = graph.of_type(INSTANCE)
    check_keys = [r for r in graph.of_type(PRIVATE_KEY) if "NcclEfaValidation" in (r.parent or "")]
    assert len(check_keys) == 2, [r.name for r in graph.of_type(PRIVATE_KEY)]
    machine_keys = {r.name for r in graph.of_type(PRIVATE_KEY)} - {r.name for r in check_keys}
    assert machine_keys == {f"{i.name}-host-key" for i in instances}
    check_urns = {r.urn for r in check_keys}
    for instance in instances:
        assert not instance.dependencies & check_urns, instance.urn
    for step in graph.of_type(COMMAND):
        assert not step.dependencies & check_urns, f"{step.urn} dials with a pod key"


def test_private_host_keys_are_never_plain(stack_graph):
    stack, graph = stack_graph
    bodies = []
    for instance in graph.of_type(INSTANCE):
        private = boot_config(instance)["ssh_keys"]["ed25519_private"]
        bodies += [line for line in private.splitlines()[1:-1] if len(line) > 20]
    assert bodies, stack
    for key in graph.of_type(PRIVATE_KEY):
        assert {"privateKeyOpenssh", "privateKeyPem"} <= set(key.additional_secret_outputs), (
            f"{key.urn}: the private halves must be secret outputs"
        )
    for resource in graph:
        for text in [*plain_strings(resource.inputs), *plain_strings(resource.outputs)]:
            assert not any(body in text for body in bodies), f"{resource.urn}: private host key"
    for text in plain_strings(graph.outputs):
        assert not any(body in text for body in bodies), f"{stack}: private host key in outputs"


def test_cloud_config_round_trips_any_key():
    generated = mocks.ed25519_key("round trip")
    text = host_keys.cloud_config(generated["privateKeyOpenssh"], generated["publicKeyOpenssh"])
    parsed = yaml.safe_load(text)
    assert parsed["ssh_keys"]["ed25519_private"] == generated["privateKeyOpenssh"]
    assert parsed["ssh_keys"]["ed25519_public"] == generated["publicKeyOpenssh"].strip()
    assert (
        host_keys.cloud_config(generated["privateKeyOpenssh"], generated["publicKeyOpenssh"])
        == text
    ), "rendering must be deterministic"


@pytest.mark.parametrize(
    ("stored", "booted"),
    [
        (None, False),
        ("", False),
        ("da39a3ee5e6b4b0d3255bfef95601890afd80709", False),  # SHA-1 of nothing
        ("2fd4e1c67a2d28fced849ee1bb76e7391b93eb12", True),
    ],
)
def test_stored_user_data_tells_machines_apart(stored, booted):
    assert host_keys.booted_with_user_data(stored) is booted


def _steps_dialling(graph: Graph, machine: str) -> list[Resource]:
    instance = graph.named(machine)
    addresses = {fake_ip("198.51", machine), fake_ip("10.42", machine)}
    for eip in graph.of_type(EIP):
        if eip.name == f"{machine}-ip":
            addresses.add(fake_ip("203.0", eip.name))
    found = [c for c in graph.of_type(COMMAND) if connection(c)["host"] in addresses]
    assert found, f"no step dials {instance.name}"
    return found


def instance_id(machine: str) -> str:
    return fake_id("i-", machine)  # the mocks' id of that instance


def test_a_machine_of_an_earlier_release_is_pinned_from_host_keys_by_instance_id():
    node = "dev-gpu-a10g-0"
    with mocks.booted_without_user_data({node}):
        graph = run_program("dev", config={"hostKeys": {instance_id(node): OLD_MACHINE_KEY}})
    # Its first contact checks the key read out of band, then replaces it like any other.
    assert first_keys(graph, node) == [OLD_MACHINE_KEY]
    for step in _steps_dialling(graph, node):
        assert connection(step)["hostKey"] == rotated_key(node), f"{step.urn}: {node}"


@pytest.mark.parametrize("entry", [None, "i-0123456789abcdef0"])
def test_a_machine_with_no_key_to_check_stops_the_up_naming_it_and_the_key_to_set(entry):
    """Fail closed (issue 40, finding 5): a machine that booted without a generated key and has
    no `hostKeys` entry of its own instance id (none, or one of another machine) stops the run;
    before, its first contact went unpinned with a warning."""
    control_plane = "dev-gpu-control-plane"
    config = {"hostKeys": {entry: OLD_MACHINE_KEY}} if entry else {}
    with mocks.booted_without_user_data({control_plane}), pytest.raises(UnpinnedHost) as stop:
        run_program("dev", config=config)
    message = str(stop.value)
    assert control_plane in message, message
    assert f"gpu-cluster:hostKeys.{instance_id(control_plane)}" in message, message


def test_a_host_keys_entry_is_accepted_beside_the_boot_key():
    """Finding 2 of issue 40: `hostKeys.<instance id>` is honoured for every machine, as the
    message of a first contact that finds another key and docs/ssh-keys.md tell operators to
    set it; before, a machine that booted with user data ignored it."""
    node = "dev-gpu-a10g-0"
    graph = run_program("dev", config={"hostKeys": {instance_id(node): OLD_MACHINE_KEY}})
    boot = installed_public_key(graph.named(node)).strip()
    assert first_keys(graph, node) == [boot, OLD_MACHINE_KEY]
    for step in _steps_dialling(graph, node):
        assert connection(step)["hostKey"].strip() == rotated_key(node), step.urn


def test_operator_hosts_are_pinned_from_config_and_refused_without():
    """Finding 4 of issue 34: a bastion or existing control plane without its host key is a
    configuration error naming the key and how to get it, never a warning and a connection
    that accepts any host."""
    from components.settings.load import ConfigError

    network = {**stack_file("prod")["gpu-cluster:network"]}
    control_plane = {**stack_file("prod")["gpu-cluster:controlPlane"]}
    unpinned_network = {**network, "bastion": {**network["bastion"]}}
    del unpinned_network["bastion"]["hostKey"]
    unpinned_control_plane = {k: v for k, v in control_plane.items() if k != "hostKey"}
    with pytest.raises(ConfigError) as refused:
        load_stack_settings(
            "prod", config={"network": unpinned_network, "controlPlane": unpinned_control_plane}
        )
    keys = {p.key for p in refused.value.problems}
    assert keys == {"gpu-cluster:network.bastion.hostKey", "gpu-cluster:controlPlane.hostKey"}
    assert "ssh-keyscan" in str(refused.value), refused.value

    control_plane["hostKey"] = OLD_MACHINE_KEY
    network["bastion"] = {**network["bastion"], "hostKey": BASTION_KEY}
    pinned = run_program("prod", config={"network": network, "controlPlane": control_plane})
    for step in pinned.of_type(COMMAND):
        conn = connection(step)
        assert conn["proxy"]["hostKey"] == BASTION_KEY, step.urn
        if conn["host"] == control_plane["host"]:
            assert conn["hostKey"] == OLD_MACHINE_KEY, step.urn


def test_the_image_builder_boots_with_its_own_key_and_is_pinned():
    pool = {**stack_file("dev")["gpu-cluster:nodePools"][0], "image": "baked"}
    graph = run_program("dev", config={"nodePools": [pool]})
    machines = machines_by_address(graph)
    builders = [r for r in graph.of_type(INSTANCE) if r.name.endswith("-builder")]
    assert builders, "a baked pool builds its image on a builder machine"
    for builder in builders:
        assert "userData" in builder.ignore_changes, builder.urn
        assert first_keys(graph, builder.name) == [installed_public_key(builder).strip()]
        expected = rotated_key(builder.name)
        steps = [
            c for c in graph.of_type(COMMAND) if machines.get(connection(c)["host"]) is builder
        ]
        assert len(steps) >= 3, f"{builder.name}: install, prepare and power-off steps"
        for step in steps:
            assert connection(step).get("hostKey", "").strip() == expected, step.urn


def test_no_text_says_a_replacement_inherits_ignored_inputs():
    """Issue 40, finding 8: the CHANGELOG, decision 002 and `pinned()`'s docstring said the
    engine gives a replacement the ignored `userData` of the machine it replaces, and that older
    machines keep their unpinned connection; decision 030 shows the engine checks the
    program's inputs for a replacement (step_generator.go `continueStepsFromDiff`)."""
    from tools.harness.stacks import ROOT

    wrong = (
        "replacement inherits the ignored",
        "gives a replacement the ignored",
        "a replacement gets the ignored",
        "keep their connection as it was",
        "booted without user data again",
    )
    for path in ("CHANGELOG.md", "components/hosts/host_keys.py", *DECISIONS):
        text = " ".join((ROOT / path).read_text().split())
        for phrase in wrong:
            assert phrase not in text, f"{path}: {phrase!r}"


DECISIONS = (
    "docs/decisions/002-ssh-host-keys-are-generated-and-pinned.md",
    "docs/decisions/041-a-host-key-only-its-host-can-use.md",
    "docs/ssh-keys.md",
)
