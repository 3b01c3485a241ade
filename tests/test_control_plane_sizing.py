"""A managed control plane sized to its fleet (components/settings/control_plane_size.py and the
rule `control_plane_sized_to_fleet`): the published sizes, the vCPUs and memory read from an
instance type's name, and the settings error that names the size to use."""

from __future__ import annotations

import logging

import pytest

from components.settings import control_plane_size
from components.settings.control_plane_size import Size, instance_size, needed
from components.settings.load import ConfigError
from tools.harness.stacks import STACKS, fleet_config, load_stack_settings, run_program

POOL = {"name": "a", "instanceType": "g5.xlarge", "count": 1}
MANAGED = {"mode": "managed", "apiAllowedCidrs": ["203.0.113.0/24"], "podCidr": "10.0.0.0/12"}
KEY = "gpu-cluster:controlPlane.instanceType"


def _settings(nodes: int, instance_type: str):
    return load_stack_settings(
        "dev",
        config={
            "nodePools": [{**POOL, "count": nodes}],
            "controlPlane": {**MANAGED, "instanceType": instance_type},
        },
    )


def _problems(nodes: int, instance_type: str, **config) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(
            "dev",
            config={
                "nodePools": [{**POOL, "count": nodes}],
                "controlPlane": {**MANAGED, "instanceType": instance_type},
                **config,
            },
        )
    return {p.key: f"{p.given} -> {p.expected}" for p in caught.value.problems}


@pytest.mark.parametrize(
    ("instance_type", "size"),
    [
        ("m7i.large", Size(2, 8.0)),
        ("m7g.medium", Size(1, 4.0)),
        ("m6a.8xlarge", Size(32, 128.0)),
        ("m7i-flex.xlarge", Size(4, 16.0)),
        ("c7i.4xlarge", Size(16, 32.0)),
        ("r6id.2xlarge", Size(8, 64.0)),
        ("t3.medium", Size(2, 4.0)),
        ("t3a.2xlarge", Size(8, 32.0)),
    ],
)
def test_vcpus_and_memory_come_from_the_name(instance_type, size):
    assert instance_size(instance_type) == size


@pytest.mark.parametrize("instance_type", ["m5.metal", "x2idn.16xlarge", "p5.48xlarge", "t3.huge"])
def test_a_family_or_size_the_table_does_not_know_has_no_size(instance_type):
    assert instance_size(instance_type) is None


@pytest.mark.parametrize(
    ("nodes", "size"),
    [
        (1, Size(2, 3.75)),  # kube-up n1-standard-1, kubeadm's 2 CPUs
        (5, Size(2, 3.75)),
        (6, Size(2, 7.5)),  # n1-standard-2
        (11, Size(4, 15.0)),  # n1-standard-4
        (25, Size(4, 16.0)),  # OpenShift: 25 workers on 4 vCPUs/16 GB
        (100, Size(8, 32.0)),  # OpenShift: 100 workers on 8/32
        (101, Size(8, 32.0)),  # n1-standard-8
        (250, Size(16, 96.0)),  # OpenShift: 250 workers on 16/96
        (500, Size(16, 96.0)),  # n1-standard-16 (60 GB), OpenShift's 250-worker size
        (501, Size(32, 120.0)),  # n1-standard-32
        (1000, Size(32, 120.0)),
    ],
)
def test_the_size_a_fleet_needs_follows_the_published_figures(nodes, size):
    assert needed(nodes) == size


def test_a_control_plane_too_small_for_its_fleet_is_refused_naming_the_size_to_use():
    found = _problems(1000, "m7i.large")
    assert found[KEY] == (
        "'m7i.large' -> an instance type with at least 32 vCPUs and 120 GiB for 1000 GPU "
        "node(s), like m7i.8xlarge: m7i.large has 2 vCPUs and 8 GiB (kube-up's master for 1000 "
        "nodes is n1-standard-32; OpenShift ran 250 workers on 16 vCPUs and 96 GB; scale the "
        "control plane up first)"
    )


@pytest.mark.parametrize(
    ("nodes", "too_small", "fits"),
    [
        (10, "c7i.large", "c7i.xlarge"),
        (100, "m7i.xlarge", "m7i.2xlarge"),
        (256, "r7i.2xlarge", "r7i.4xlarge"),
    ],
)
def test_the_named_size_is_the_smallest_of_the_family_that_fits(nodes, too_small, fits):
    assert f"like {fits}:" in _problems(nodes, too_small)[KEY]
    assert _settings(nodes, fits).control_plane.instance_type == fits


def test_a_burstable_family_without_a_size_that_large_names_another():
    assert "like m7i.8xlarge:" in _problems(300, "t3.2xlarge")[KEY]


def test_the_size_is_reported_with_every_other_problem():
    found = _problems(
        1000,
        "m7i.large",
        network={"create": True, "cidr": "10.42.0.0/24", "sshAllowedCidrs": ["203.0.113.0/24"]},
    )
    assert KEY in found
    assert "gpu-cluster:network.cidr" in found, found


def test_an_unknown_family_is_not_refused_but_warned_about(caplog):
    config = {
        "nodePools": [{**POOL, "count": 2}],
        "controlPlane": {**MANAGED, "instanceType": "x2idn.16xlarge"},
    }
    assert load_stack_settings("dev", config=config).control_plane.instance_type == "x2idn.16xlarge"
    with caplog.at_level(logging.WARNING):
        run_program("dev", config=config)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "controlPlane.instanceType x2idn.16xlarge" in w and "not checked" in w for w in warnings
    ), warnings


def test_a_known_family_says_nothing(caplog):
    with caplog.at_level(logging.WARNING):
        run_program("dev")
    assert not [r for r in caplog.records if "sizing table" in r.getMessage()]


def test_an_existing_control_plane_is_not_sized_here():
    settings = load_stack_settings("prod", config={"nodePools": [{**POOL, "count": 1000}]})
    assert sum(pool.count for pool in settings.node_pools) == 1000


@pytest.mark.parametrize("stack", STACKS)
def test_the_stack_files_pass(stack):
    settings = load_stack_settings(stack, config={})
    assert settings.node_pools


@pytest.mark.parametrize("nodes", [64, 256, 1000])
def test_the_tools_fleets_get_the_size_an_operator_would_set(nodes):
    """tools.timeline and tools.benchmark model fleets of the dev stack: its m7i.large is
    replaced by the size the settings name, so the fleet is a valid stack."""
    settings = load_stack_settings("dev", config=fleet_config("dev", nodes))
    machine = settings.control_plane.instance_type
    assert machine == control_plane_size.to_use("m7i.large", nodes)
    assert instance_size(machine).holds(needed(nodes))
