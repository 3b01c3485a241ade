"""Config that would give more away than it should: a private key set without `--secret` (it
sits in the stack file in clear), and values that only look like ASCII numbers (Unicode digits
pass `str.isdigit()` and `\\d`, then reach scripts and the API as something else)."""

from __future__ import annotations

import json
import re

import pytest
from pulumi.runtime import config as runtime_config
from pydantic_core import PydanticCustomError

from components.settings import constants, fields, model, node_pool, rules, sections
from components.settings.load import ConfigError
from policies.gpu_cluster_policies import validators
from tools.harness.stacks import (
    PROJECT,
    TEST_SECRETS,
    engine_config,
    load_stack_settings,
    stack_file,
)

KEY = f"{PROJECT}:sshPrivateKey"


def test_a_plain_private_key_is_refused_naming_the_key():
    values = {**stack_file("dev"), KEY: TEST_SECRETS["sshPrivateKey"]}
    flat, _secret_keys = engine_config(values, {})
    runtime_config.set_all_config(flat, [])  # as `pulumi config set` without --secret leaves it
    from components.settings.load import load_settings

    with pytest.raises(ConfigError) as caught:
        load_settings()
    (problem,) = caught.value.problems
    assert problem.key == KEY, str(problem)
    assert "pulumi config set --secret" in problem.expected, str(problem)
    assert "pulumi config rm" in problem.expected, str(problem)
    assert TEST_SECRETS["sshPrivateKey"].splitlines()[1] not in str(caught.value), "key echoed"


def test_a_secret_key_from_the_cli_environment_is_accepted(monkeypatch):
    """`pulumi up` passes the secret keys in PULUMI_CONFIG_SECRET_KEYS, not set_all_config."""
    flat, _secret_keys = engine_config(stack_file("dev"), TEST_SECRETS)
    runtime_config.set_all_config(flat, [])
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps([KEY]))
    from components.settings.load import load_settings

    settings = load_settings()
    assert settings.ssh_private_key.get_secret_value() == TEST_SECRETS["sshPrivateKey"].strip()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"devicePlugin": {"version": "v0.\u0662\u0660.0"}}, "devicePlugin.version"),
        ({"devicePlugin": {"version": "v\uff10.20.0"}}, "devicePlugin.version"),
    ],
    ids=["arabic-indic", "fullwidth"],
)
def test_unicode_digits_are_refused_in_versions(override, key):
    with pytest.raises(ConfigError) as caught:
        load_stack_settings(config=override)
    keys = [p.key for p in caught.value.problems]
    assert f"{PROJECT}:{key}" in keys, keys


def test_unicode_digits_are_refused_in_an_endpoint_port():
    assert fields._endpoint("10.0.1.10:6443") == "10.0.1.10:6443"
    with pytest.raises(PydanticCustomError, match="host:port"):
        fields._endpoint("10.0.1.10:\u0666\u0664\u0664\u0663")  # Arabic-Indic 6443


def test_policy_numbers_are_ascii():
    assert not validators._positive_int("\u0661"), "an Arabic-Indic 1 counted as a GPU count"
    assert validators._positive_int("1")


def test_no_config_pattern_matches_unicode_classes():
    """`\\d`, `\\w` and `\\s` match far beyond ASCII in Python; a pattern that accepts
    config values needs re.ASCII (or spelled-out ASCII classes)."""
    loose = [
        f"{module.__name__}.{name}"
        for module in (constants, fields, model, node_pool, rules, sections)
        for name, value in vars(module).items()
        if isinstance(value, re.Pattern)
        and re.search(r"\\[dwsDWS]", value.pattern)
        and not value.flags & re.ASCII
    ]
    assert not loose, f"patterns matching Unicode digits/letters/spaces: {loose}"
