"""The settings of pools of existing servers (`nodePools[].hosts`): what a hosts pool needs, what
it must not have, and one clear error per problem naming its key path, the value and the fix,
before any resource is registered. Keys follow the existing control plane's: a host key is
required and parsed (ED25519 or ECDSA, one line), an address is an IP or a DNS name."""

from __future__ import annotations

import copy

import pytest

from components.settings import ExistingControlPlane
from components.settings.hosts_pool import HostsNodePool
from components.settings.load import ConfigError
from tools.harness.mocks import ed25519_key
from tools.harness.stacks import load_stack_settings, stack_file

STACK = "onprem"
POOLS = stack_file(STACK)["gpu-cluster:nodePools"]
CONTROL_PLANE = stack_file(STACK)["gpu-cluster:controlPlane"]
KEY_A = POOLS[0]["hosts"][0]["hostKey"]
RSA_HOST_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDEaQ7M6MyyRgcQyfIuP1yNpyNV9T0sdOpOfrixTl+Gqg1SSAoaQWpHq"
    "W8HjklKw2ye2D7k7JlN09rQ4mCsodU2TGRPRcQvbwpGT5ceVA8DZ+BBOSQpHCFQuuRuCdg76UB3ZWpNlnVW7ty4uJ0VYs"
    "jjaUNDMTVb3i95B2MdsqWgYrGHnjs1Lba1vy45cBc0WMIHDVC3v1EnKtLvS2Q1htm2bKTMEZBVSDTHXzI/fwEzy7L6vq"
    "pyyZ0tALOb3FvLiRyDnbkTsnmtzDVeAqrlDWxJNMLX9NCvi5Wdzr2yIV1OHmbyDkdSHYsOg8wuqyQW+1NiLiWsZiIvvR"
    "IG8QVTMAWJkh"
)


def settings(**config):
    return load_stack_settings(STACK, config=config)


def problems(**config) -> dict[str, str]:
    """Key path -> the problem's message (given and expected), for a config that must fail."""
    with pytest.raises(ConfigError) as caught:
        settings(**config)
    assert "Traceback" not in str(caught.value)
    return {p.key.removeprefix("gpu-cluster:"): str(p) for p in caught.value.problems}


def pool(**changes) -> dict:
    found = copy.deepcopy(POOLS[0])
    found.update(changes)
    return found


def host(**changes) -> dict:
    return {
        "address": "10.8.0.31",
        "hostKey": ed25519_key("settings host")["publicKeyOpenssh"],
        **changes,
    }


# ------------------------------------------------------------------ what loads


def test_the_onprem_stack_loads_as_pools_of_hosts_on_an_existing_control_plane():
    loaded = settings()
    assert isinstance(loaded.control_plane, ExistingControlPlane)
    assert [type(p) for p in loaded.node_pools] == [HostsNodePool, HostsNodePool]
    hgx, l40s = loaded.node_pools
    assert [h.key for h in hgx.hosts] == ["10-8-0-21", "gpu-b"]
    assert [h.key for h in l40s.hosts] == ["gpu-l40s-1"]
    assert hgx.count == 2 and hgx.gpu_type.gpu_count == 8 and hgx.gpu_type.needs_fabric_manager
    assert hgx.gpu_type.nvlink and not hgx.uses_efa and hgx.kernel_module_type == "open"
    assert not l40s.gpu_type.needs_fabric_manager and l40s.gpu_type.gsp_firmware
    assert not loaded.launches_machines and not loaded.instance_pools
    assert loaded.ssh.public_key is None, "a stack of existing machines needs no login public key"


def test_the_design_contracts_example_loads_with_its_gpus():
    """DESIGN.md's `- name: onprem / hosts: [{address: 10.8.0.21, hostKey: ssh-ed25519 ...}]`,
    with the GPUs the checks expect."""
    example = {
        "name": "onprem",
        "hosts": [{"address": "10.8.0.21", "hostKey": KEY_A}],
        "gpu": {"model": "A100", "count": 4},
    }
    (loaded,) = settings(nodePools=[example]).node_pools
    assert loaded.hosts[0].key == "10-8-0-21" and loaded.gpu_type.gpu.name == "NVIDIA A100"


def test_an_empty_list_of_hosts_is_a_pool_of_no_node():
    (loaded, _) = settings(nodePools=[pool(hosts=[]), POOLS[1]]).node_pools
    assert loaded.count == 0


@pytest.mark.parametrize("name", [None, "gpu-v6"])
def test_an_ipv6_host_is_refused_naming_why(name):
    """Issue 41: an existing host's serving certificate is approved against its address, which
    lib/common.sh require_serving_names takes as IPv4 only and openssl prints expanded for IPv6:
    such a host could never be approved, so its address is refused with or without a name."""
    ipv6 = host(address="fd00:8::21", **({"name": name} if name else {}))
    found = problems(nodePools=[pool(hosts=[ipv6])])
    assert "IPv6 address cannot" in found["nodePools[0].hosts[0].address"], found


def test_hosts_beside_ec2_pools_on_an_existing_control_plane():
    prod = load_stack_settings(
        "prod", config={"nodePools": [*stack_file("prod")["gpu-cluster:nodePools"], POOLS[1]]}
    )
    assert prod.launches_machines and len(prod.host_pools) == 1 and len(prod.instance_pools) == 3


def test_a_public_bastion_relays_to_hosts_without_a_security_group():
    """A bastion's security group is what EC2 machines admit SSH from; a stack that launches
    none asks for no group."""
    bastion = {
        "host": "198.51.100.7",
        "hostKey": ed25519_key("settings bastion")["publicKeyOpenssh"],
    }
    loaded = settings(network={"bastion": bastion})
    assert loaded.network.bastion is not None and loaded.network.bastion.security_group_id is None
    found = load_problems_of_prod_with_bastion(bastion)
    assert "network.bastion.securityGroupId" in found, found


def load_problems_of_prod_with_bastion(bastion: dict) -> dict[str, str]:
    network = dict(stack_file("prod")["gpu-cluster:network"], bastion=bastion)
    with pytest.raises(ConfigError) as caught:
        load_stack_settings("prod", config={"network": network})
    return {p.key.removeprefix("gpu-cluster:"): str(p) for p in caught.value.problems}


# ------------------------------------------------------------------ what a host needs


def test_a_host_without_its_host_key_is_refused_naming_how_to_read_it():
    found = problems(nodePools=[pool(hosts=[{"address": "10.8.0.31", "port": 2222}])])
    message = found["nodePools[0].hosts[0].hostKey"]
    assert "got nothing" in message and "ssh-keyscan -t ed25519 -p 2222 10.8.0.31" in message


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (RSA_HOST_KEY, "RSA cannot be pinned"),
        (KEY_A + "\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA", "exactly one line"),
        (KEY_A.replace("ssh-ed25519", "ecdsa-sha2-nistp256"), "ED25519 or ECDSA"),
        ("AAAAC3NzaC1lZDI1NTE5AAAAIIxz", "ED25519 or ECDSA"),
    ],
    ids=["rsa", "two-lines", "blob-of-another-type", "no-type"],
)
def test_a_host_key_that_cannot_be_pinned_is_refused(key, says):
    found = problems(nodePools=[pool(hosts=[host(hostKey=key)])])
    assert says in found["nodePools[0].hosts[0].hostKey"], found


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("10.8.0.21; reboot", "or a DNS name"),
        ("gpu 01.lab", "or a DNS name"),
        ("127.0.0.1", "loopback"),
        ("localhost", "not localhost"),
        ("169.254.1.1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::ffff:10.8.0.21", "not as ::ffff:10.8.0.21"),
    ],
)
def test_an_address_is_an_ip_or_a_dns_name(address, says):
    found = problems(nodePools=[pool(hosts=[host(address=address, name="x")])])
    assert says in found["nodePools[0].hosts[0].address"], found


def test_a_host_user_and_port_are_checked():
    found = problems(nodePools=[pool(hosts=[host(user="Root User", port=0)])])
    assert "a login name" in found["nodePools[0].hosts[0].user"]
    assert "a number >= 1" in found["nodePools[0].hosts[0].port"]


def test_two_hosts_of_one_name_in_a_pool_are_refused():
    found = problems(
        nodePools=[
            pool(hosts=[host(name="gpu"), host(name="gpu", address="10.8.0.32", hostKey=KEY_A)])
        ]
    )
    assert "hosts[0] is also 'gpu'" in found["nodePools[0].hosts[1].name"], found


def test_a_server_in_two_entries_or_with_the_control_planes_key_is_refused():
    twice = copy.deepcopy(POOLS)
    twice[1]["hosts"].append({**POOLS[0]["hosts"][0], "name": "again"})
    found = problems(nodePools=twice)
    assert (
        "nodePools[0].hosts[0].address is also 10.8.0.21" in found["nodePools[1].hosts[1].address"]
    ), found
    assert "nodePools[0].hosts[0].hostKey has this one" in found["nodePools[1].hosts[1].hostKey"]
    control_plane_key = problems(nodePools=[pool(hosts=[host(hostKey=CONTROL_PLANE["hostKey"])])])
    assert "controlPlane.hostKey has this one" in control_plane_key["nodePools[0].hosts[0].hostKey"]


def test_a_host_name_too_long_for_a_node_name_is_refused():
    found = problems(nodePools=[pool(name="p" * 30, hosts=[host(name="h" * 40)]), POOLS[1]])
    assert "has 79" in found["nodePools[0].hosts[0].name"], found


# ------------------------------------------------------------------ what a hosts pool must not have


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("instanceType", "g5.xlarge"),
        ("count", 2),
        ("market", "spot"),
        ("efa", True),
        ("rootVolumeGiB", 500),
        ("amiId", "ami-0123456789abcdef0"),
        ("image", "baked"),
        ("capacityReservationId", "cr-0123456789abcdef0"),
        ("metadataHopLimit", 2),
    ],
)
def test_a_key_of_launched_machines_is_refused_on_a_hosts_pool(key, value):
    found = problems(nodePools=[pool(**{key: value})])
    message = found[f"nodePools[0].{key}"]
    assert f"'{key}' is a key of a pool of EC2 instances only" in message, message


def test_a_key_of_hosts_on_a_pool_of_instances_says_whose_it_is():
    ec2 = {"name": "a", "instanceType": "g5.xlarge", "count": 1, "gpu": {"model": "A10G"}}
    with pytest.raises(ConfigError) as caught:
        load_stack_settings("prod", config={"nodePools": [ec2]})
    (problem,) = caught.value.problems
    assert problem.key == "gpu-cluster:nodePools[0].gpu", problem
    assert "'gpu' is a key of a pool of existing hosts only" in problem.expected, problem


# ------------------------------------------------------------------ the GPUs


def test_the_gpus_are_required_and_from_the_catalog():
    found = problems(nodePools=[{k: v for k, v in pool().items() if k != "gpu"}])
    assert "got nothing" in found["nodePools[0].gpu"], found
    found = problems(nodePools=[pool(gpu={"model": "RTX 4090", "count": 0})])
    assert "T4, A10G, L4, L40S, V100, A100, H100, H200, B200" in found["nodePools[0].gpu.model"]
    assert "a number >= 1" in found["nodePools[0].gpu.count"]


def test_the_driver_and_modules_are_checked_against_the_gpu_model():
    found = problems(
        nodePools=[
            pool(
                gpu={"model": "B200", "count": 8, "nvswitch": True},
                driverVersion="535",
                kernelModules="proprietary",
            )
        ]
    )
    assert (
        "supports the NVIDIA B200 of the pool's hosts: 570 or newer"
        in found["nodePools[0].driverVersion"]
    )
    assert "open for the NVIDIA B200 of the pool's hosts" in found["nodePools[0].kernelModules"]


def test_nvswitch_only_on_a_model_nvidia_builds_nvswitch_boards_of():
    found = problems(nodePools=[pool(gpu={"model": "L40S", "count": 8, "nvswitch": True})])
    assert "no NVSwitch board carries the L40S" in found["nodePools[0].gpu.nvswitch"], found


# ------------------------------------------------------------------ the rest of the stack


def test_hosts_join_an_existing_control_plane_only():
    found = problems(controlPlane={"mode": "managed"}, ssh={"publicKey": KEY_A})
    message = found["nodePools[0].hosts"]
    assert "hosts with controlPlane.mode: existing only" in message, message


def test_a_network_key_of_a_stack_that_launches_nothing_is_refused():
    found = problems(network={"create": True, "sshAllowedCidrs": ["10.0.0.0/8"]})
    assert "launches no EC2 machine" in found["network.create"], found
    assert "launches no EC2 machine" in found["network.sshAllowedCidrs"], found
    control_plane = dict(CONTROL_PLANE, securityGroupId="sg-0a1b2c3d4e5f60799")
    found = problems(controlPlane=control_plane)
    assert "no security group" in found["controlPlane.securityGroupId"], found
    # Pulumi.yaml's default network.cidr reaches every stack from the CLI: not a mistake.
    assert settings(network={"cidr": "10.42.0.0/16"}).network.cidr == "10.42.0.0/16"


def test_the_login_public_key_is_required_as_soon_as_the_stack_launches_a_machine():
    ec2 = {"name": "a10g", "instanceType": "g5.xlarge", "count": 1}
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(
            "prod",
            config={"nodePools": [ec2], "ssh": {"user": "ubuntu"}},
        )
    (problem,) = [p for p in caught.value.problems if p.key == "gpu-cluster:ssh.publicKey"]
    assert "the EC2 machines the stack launches boot with it" in problem.expected, problem
