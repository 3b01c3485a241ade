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

from components.config_errors import Problem, aliases, problems_of, show, unknown_key
from components.settings import PROJECT, Settings

OBJECT_KEYS = frozenset(
    {"controlPlane", "network", "ssh", "nodePools", "devicePlugin", "validation", "tags"}
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
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        found.extend(p for p in problems_of(exc) if p.key not in unreadable)
    if found:
        raise ConfigError(sorted(set(found), key=lambda p: p.key))
    return settings


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
