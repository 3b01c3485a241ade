"""Turn the stack's `gpu-cluster:` configuration into a validated `Settings`, or one clear error.

Every problem in a stack is reported at once, each as
`gpu-cluster:<key path>: got <value>; expected <what is accepted>`, and raised as a
`pulumi.RunError`, which the Pulumi CLI prints without a Python traceback. Nothing is registered
before this succeeds, so bad input never half-creates infrastructure.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pulumi
from pydantic import ValidationError

from components.settings import PROJECT, Settings
from components.settings.errors import SECRET_KEYS, Problem, aliases, problems_of, show, unknown_key
from components.settings.fields import ZONE_NAME

OBJECT_KEYS = frozenset(
    {
        "controlPlane",
        "network",
        "ssh",
        "nodePools",
        "devicePlugin",
        "validation",
        "tags",
        "kubeconfig",
        "hostKeys",
        "dcgmExporter",
        "featureDiscovery",
        "nodeTerminationHandler",
    }
)


class ConfigError(pulumi.RunError):
    """The stack configuration is invalid. `problems` lists each one; the message lists all."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(
            f"the stack configuration has {len(problems)} {noun}; nothing was created.\n{lines}\n"
            f"Fix them with `pulumi config set` or in Pulumi.<stack>.yaml "
            f"(every key is described in Pulumi.yaml and the README)."
        )


def load_settings(config: pulumi.Config | None = None) -> Settings:
    """Read every `gpu-cluster:` key of the current stack and validate it as one model."""
    config = config or pulumi.Config(PROJECT)
    raw: dict[str, Any] = {}
    found: list[Problem] = []
    known = set(aliases(Settings))
    for key in sorted(_configured_keys()):
        if key not in known:
            found.append(unknown_key((key,)))
            continue
        value = config.get(key)
        if key in SECRET_KEYS and value is not None and not _is_secret(f"{PROJECT}:{key}"):
            found.append(
                Problem(
                    f"{PROJECT}:{key}",
                    "a plain value, stored in clear text in the stack file",
                    "a secret: remove it with `pulumi config rm "
                    f"{PROJECT}:{key}`, then set it with `pulumi config set --secret "
                    f"{PROJECT}:{key} < ~/.ssh/id_ed25519` (and rotate the key: it was readable)",
                )
            )
            continue
        if key in OBJECT_KEYS:
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                found.append(
                    Problem(f"{PROJECT}:{key}", show((key,), value), "a YAML object or list")
                )
                continue
        raw[key] = value
    unreadable = {p.key for p in found}
    # Checked on the raw zones, so a zone of another region is reported with every other
    # problem, not after they are fixed.
    found.extend(_zones_outside(raw.get("network"), _aws_region()))
    try:
        settings = Settings.model_validate(raw, by_alias=True, by_name=False)
    except ValidationError as exc:
        found.extend(p for p in problems_of(exc) if p.key not in unreadable)
    if found:
        raise ConfigError(sorted(set(found), key=lambda p: p.key))
    return settings


def _aws_region() -> tuple[str, str] | None:
    """(region, where it was set) for the AWS provider: `aws:region`, else the environment the
    provider reads when that is unset (AWS_REGION, then AWS_DEFAULT_REGION); None when neither
    says."""
    configured = pulumi.Config("aws").get("region")
    if configured:
        return configured, "aws:region"
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(variable):
            return os.environ[variable], variable
    return None


def _zones_outside(network: Any, region: tuple[str, str] | None) -> list[Problem]:
    """A problem per zone name of `network.availabilityZones` (as configured) that is not in
    the provider's region: AWS refuses a subnet there, at `up`, after the VPC exists. A value
    that is no zone name is left to the model, which says so."""
    zones = network.get("availabilityZones") if isinstance(network, dict) else None
    if region is None or not isinstance(zones, list):
        return []
    name, source = region
    return [
        Problem(
            f"{PROJECT}:network.availabilityZones[{index}]",
            show(("network",), zone),
            f"a zone of the stack's region {name} (from {source}), like {name}a",
        )
        for index, zone in enumerate(zones)
        if isinstance(zone, str)
        and (match := ZONE_NAME.match(zone.strip())) is not None
        and match["region"] != name
    ]


def _is_secret(full_key: str) -> bool:
    """Whether the engine marked this config value secret. `pulumi up` hands the program the
    stack's secret keys in PULUMI_CONFIG_SECRET_KEYS (pulumi/pulumi
    `sdk/python/cmd/pulumi-language-python/main.go`: `pulumiConfigSecretKeysVar`), read by
    `get_config_secret_keys_env()`; `set_all_config(config, secret_keys)` (mocks, the
    automation API) sets the set `is_config_secret()` reads."""
    from pulumi.runtime import config as runtime_config

    return (
        runtime_config.is_config_secret(full_key)
        or full_key in runtime_config.get_config_secret_keys_env()
    )


def _configured_keys() -> set[str]:
    """The keys set in this stack's `gpu-cluster:` namespace (engine config, then environment)."""
    from pulumi.runtime import config as runtime_config

    keys = set(runtime_config.CONFIG.get())
    env = runtime_config.get_config_env() or {}
    keys.update(env)
    prefix = f"{PROJECT}:"
    env_prefix = "PULUMI_CONFIG_" + PROJECT.upper().replace("-", "_") + "_"
    names = {k[len(prefix) :] for k in keys if k.startswith(prefix)}
    names.update(
        k[len(env_prefix) :]
        for k in os.environ
        if k.startswith(env_prefix) and k[len(env_prefix) :]
    )
    return {n.removesuffix(":") for n in names}
