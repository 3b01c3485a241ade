"""Pulumi.yaml documents the same contract the settings model enforces."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import TypeAdapter

from components.settings import Settings
from tools.harness.stacks import ROOT, STACKS

PROJECT = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())


def test_project_is_python_with_a_virtualenv():
    assert PROJECT["name"] == "gpu-cluster"
    assert PROJECT["runtime"]["name"] == "python"
    assert PROJECT["runtime"]["options"]["virtualenv"] == "venv"


def test_every_settings_key_is_declared_with_a_description():
    declared = PROJECT["config"]
    keys = {field.alias or name for name, field in Settings.model_fields.items()}
    assert set(declared) == keys, f"Pulumi.yaml config {sorted(declared)} != model {sorted(keys)}"
    for key, declaration in declared.items():
        assert len(declaration.get("description", "")) > 20, f"{key}: describe it"


def test_declared_defaults_equal_the_models():
    """The CLI applies Pulumi.yaml defaults, the mocks do not: both must give the same values."""
    fields = {field.alias or name: field for name, field in Settings.model_fields.items()}
    for key, declaration in PROJECT["config"].items():
        if "default" not in declaration:
            assert fields[key].is_required(), f"{key}: has a default in code, none in Pulumi.yaml"
            continue
        field = fields[key]
        declared = TypeAdapter(field.annotation).validate_python(declaration["default"])
        assert declared == field.get_default(call_default_factory=True), (
            f"{key}: Pulumi.yaml default {declaration['default']!r} differs from the model's"
        )


def test_secret_keys_are_declared_secret():
    assert PROJECT["config"]["sshPrivateKey"].get("secret") is True


def test_stack_files_hold_no_secret_material():
    """The key comes from each stack's ESC environment; a stack file may hold it only as the
    CLI's `secure:` ciphertext (`pulumi config set --secret`), never in clear."""
    for stack in STACKS:
        text = (Path(ROOT) / f"Pulumi.{stack}.yaml").read_text()
        assert "PRIVATE KEY" not in text, f"Pulumi.{stack}.yaml holds a private key"
        data = yaml.safe_load(text)
        value = (data.get("config") or {}).get("gpu-cluster:sshPrivateKey")
        assert value is None or (isinstance(value, dict) and set(value) == {"secure"}), (
            f"Pulumi.{stack}.yaml: gpu-cluster:sshPrivateKey in clear"
        )
        assert data.get("environment") == [f"gpu-cluster/{stack}"], (
            f"Pulumi.{stack}.yaml does not import its ESC environment gpu-cluster/{stack}"
        )
