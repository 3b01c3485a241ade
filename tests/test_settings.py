"""The settings loader: every stack file loads, every bad configuration fails with the exact
key path, and nothing but a clean ConfigError ever comes out of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from components import catalog
from components.settings import (
    DEFAULT_DEVICE_PLUGIN_VERSION,
    ExistingControlPlane,
    ManagedControlPlane,
)
from components.settings.load import ConfigError
from tools.harness.stacks import (
    MINIMAL_STACK,
    STACKS,
    TEST_SECRETS,
    load_stack_settings,
    run_program,
    stack_file,
)

BAD_CONFIGS = yaml.safe_load((Path(__file__).parent / "bad_configs.yaml").read_text())


def _problems(**kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(**kwargs)
    return caught.value


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_loads(stack):
    settings = load_stack_settings(stack)
    pools = stack_file(stack)["gpu-cluster:nodePools"]
    assert [p.name for p in settings.node_pools] == [p["name"] for p in pools], stack
    assert settings.kubernetes_version == stack_file(stack)["gpu-cluster:kubernetesVersion"]


def test_stack_files_differ_as_documented():
    dev, staging, prod = (load_stack_settings(s) for s in STACKS)
    assert isinstance(dev.control_plane, ManagedControlPlane) and dev.network.creates_vpc
    assert len(dev.node_pools) == 1
    assert isinstance(prod.control_plane, ExistingControlPlane)
    assert not prod.network.creates_vpc and prod.network.bastion is not None
    assert len(prod.node_pools) >= 3
    assert any(p.gpu_type.needs_fabric_manager for p in prod.node_pools), "prod has NVSwitch nodes"
    assert staging.device_plugin.time_slicing.replicas > 1
    assert len({dev.cluster_name, staging.cluster_name, prod.cluster_name}) == 3


def test_defaults_live_in_code():
    """Under the SDK's mocks the CLI applies no Pulumi.yaml defaults, so the model must."""
    settings = load_stack_settings(config=MINIMAL_STACK, replace_config=True)
    assert settings.kubernetes_version == "1.35"
    assert isinstance(settings.control_plane, ManagedControlPlane)
    assert settings.network.creates_vpc and settings.network.cidr == "10.42.0.0/16"
    assert settings.ssh.user == "ubuntu"
    pool = settings.node_pools[0]
    assert (pool.driver_version, pool.root_volume_gib, pool.market) == ("580", 200, "on-demand")
    assert [t.key for t in pool.taints] == ["nvidia.com/gpu"]
    assert settings.device_plugin.version == DEFAULT_DEVICE_PLUGIN_VERSION
    assert settings.validation.enabled and settings.validation.timeout_seconds == 900


def test_private_key_stays_secret():
    settings = load_stack_settings()
    assert TEST_SECRETS["sshPrivateKey"] not in repr(settings)
    assert TEST_SECRETS["sshPrivateKey"] not in str(settings.model_dump())


def test_missing_private_key_names_the_command_to_set_it():
    error = _problems(secrets={})
    (problem,) = [p for p in error.problems if p.key == "gpu-cluster:sshPrivateKey"]
    assert "pulumi config set --secret gpu-cluster:sshPrivateKey" in problem.expected


def test_bad_private_key_is_not_echoed():
    secret = "not-a-key-but-still-secret-material"
    error = _problems(secrets={"sshPrivateKey": secret})
    assert secret not in str(error), "a secret value appeared in the error message"


def test_catalog_covers_the_required_families():
    required = {"g4dn", "g5", "g6", "g6e", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en"}
    assert required | {"p6-b200"} <= set(catalog.families())
    for name, entry in catalog.CATALOG.items():
        assert entry.gpu_count >= 1, name
        nvswitch = entry.family in {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200"}
        assert entry.needs_fabric_manager == nvswitch, f"{name}: fabric manager flag"
    assert catalog.lookup("p5.48xlarge").gpu_count == 8
    assert catalog.lookup("g5.12xlarge").gpu_count == 4
    with pytest.raises(KeyError, match=r"g9\.huge"):
        catalog.lookup("g9.huge")


@pytest.mark.parametrize("case", BAD_CONFIGS, ids=[c["name"] for c in BAD_CONFIGS])
def test_bad_configuration_names_every_key(case):
    error = _problems(config=case["set"])
    keys = {p.key for p in error.problems}
    for expected in case["errors"]:
        assert f"gpu-cluster:{expected}" in keys, f"{case['name']}: {expected} not in {keys}"
    for problem in error.problems:
        assert problem.key in str(error), f"{problem.key} missing from the message"
        assert problem.expected, f"{problem.key}: no statement of what is accepted"
    for text in case.get("says", []):
        assert text in str(error), f"{case['name']}: {text!r} not in {error}"
    assert "Traceback" not in str(error)


def test_bad_config_corpus_is_large_enough():
    assert len(BAD_CONFIGS) >= 30


def test_every_problem_reported_at_once():
    (case,) = [c for c in BAD_CONFIGS if c["name"] == "many problems at once"]
    error = _problems(config=case["set"])
    assert len(error.problems) >= len(case["errors"])
    assert f"has {len(error.problems)} problems" in str(error)


def test_message_says_what_was_given_and_what_is_accepted():
    error = _problems(config={"nodePools": [{"name": "a", "instanceType": "g9.huge", "count": 1}]})
    (problem,) = error.problems
    assert str(problem).startswith("gpu-cluster:nodePools[0].instanceType: got 'g9.huge'; expected")
    assert "g5" in problem.expected and "p5" in problem.expected


def test_unknown_key_suggests_the_right_one():
    error = _problems(
        config={"nodepools": [{"name": "a", "instanceType": "g5.xlarge", "count": 1}]}
    )
    (problem,) = [p for p in error.problems if p.key == "gpu-cluster:nodepools"]
    assert "did you mean 'nodePools'" in problem.expected


def test_bad_config_registers_no_resource():
    """A user's mistake stops the program before any resource exists (nothing half-created)."""
    with pytest.raises(ConfigError):
        graph_holder = run_program("dev", config={"kubernetesVersion": "1.10"})
        pytest.fail(f"program ran and registered {len(graph_holder)} resources")


# ---------------------------------------------------------------- property-based

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
_TOP_KEYS = [
    "clusterName",
    "kubernetesVersion",
    "controlPlane",
    "network",
    "ssh",
    "nodePools",
    "devicePlugin",
    "validation",
    "tags",
    "unknownKey",
]


@st.composite
def _mutated_config(draw):
    """The dev stack with random keys replaced by random JSON-ish values, or nested fields of a
    pool changed, so the loader sees near-valid and wild input alike."""
    config: dict = {}
    for key in draw(st.lists(st.sampled_from(_TOP_KEYS), max_size=4, unique=True)):
        config[key] = draw(_json)
    if draw(st.booleans()):
        pool = dict(stack_file("dev")["gpu-cluster:nodePools"][0])
        field = draw(st.sampled_from([*pool, "extra"]))
        pool[field] = draw(_json)
        config["nodePools"] = [pool]
    return config


@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated_config())
def test_loader_never_crashes(config):
    try:
        load_stack_settings(config=config)
    except ConfigError as error:
        assert error.problems, "a ConfigError must list its problems"
        for problem in error.problems:
            assert problem.key.startswith("gpu-cluster:"), problem
        json.dumps([str(p) for p in error.problems])


@pytest.mark.parametrize(
    ("instance_type", "default", "allowed"),
    [
        ("p3.2xlarge", "proprietary", ("proprietary",)),  # Volta: no open module
        ("g6.xlarge", "open", ("open", "proprietary")),  # Ada: open by default
        ("g4dn.xlarge", "proprietary", ("proprietary",)),  # GSP off, as AWS runs it
        ("p5.48xlarge", "open", ("open", "proprietary")),
        ("p6-b200.48xlarge", "open", ("open",)),  # Blackwell: open only
    ],
)
def test_kernel_module_type_follows_the_gpu_architecture(instance_type, default, allowed):
    pool = {"name": "a", "instanceType": instance_type, "count": 1}
    settings = load_stack_settings(config={"nodePools": [pool]})
    assert settings.node_pools[0].kernel_module_type == default
    for choice in ("open", "proprietary"):
        config = {"nodePools": [{**pool, "kernelModules": choice}]}
        if choice in allowed:
            assert load_stack_settings(config=config).node_pools[0].kernel_module_type == choice
        else:
            error = _problems(config=config)
            assert [p.key for p in error.problems] == ["gpu-cluster:nodePools[0].kernelModules"]
            assert " or ".join(allowed) in str(error)


def test_pod_cidr_holds_a_node_range_for_every_node():
    """kube-controller-manager hands every Node (control plane included) a /24 of podCidr: a /20
    holds 16, so 15 GPU nodes fit and the 16th would never become Ready."""
    cp = {
        "mode": "managed",
        "instanceType": "m7i.xlarge",  # sized for 11 to 99 GPU nodes
        "apiAllowedCidrs": ["203.0.113.0/24"],
        "podCidr": "10.244.0.0/20",
    }
    pool = {"name": "a", "instanceType": "g5.xlarge", "count": 15}
    load_stack_settings(config={"controlPlane": cp, "nodePools": [pool]})
    error = _problems(
        config={"controlPlane": cp, "nodePools": [pool, {**pool, "name": "b", "count": 1}]}
    )
    (problem,) = error.problems
    assert problem.key == "gpu-cluster:controlPlane.podCidr"
    assert "17 nodes" in str(error) and "holds 16" in str(error) and "/19" in str(error)


def test_a_long_bad_value_is_shown_cut_to_120_characters():
    """A pasted blob (a key, a manifest) in a short field: the message shows its start, cut to
    120 characters with an ellipsis, not the whole blob."""
    error = _problems(config={"clusterName": "x" * 300})
    shown = re.search(r"got ('x+\.\.\.');", str(error)).group(1)
    assert len(shown) == 120, shown
