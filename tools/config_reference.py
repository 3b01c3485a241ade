"""The configuration reference (docs/configuration.md), generated from the settings model
(components/settings/).

    python -m tools.config_reference           # print the Markdown table
    python -m tools.config_reference --write   # rewrite docs/configuration.md's generated block
    python -m tools.config_reference --check   # exit 1 when that block is out of date

Every key of the `Settings` pydantic model is a row: its full key path as written in
Pulumi.<stack>.yaml (`nodePools[].instanceType`), type, default, accepted values and the field's
description. tests/test_config_reference.py fails when docs/configuration.md and the model drift
apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import AfterValidator, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from components import catalog, settings
from components.settings import PROJECT, Settings
from components.settings.addresses import CNI_PORTS
from components.settings.hosts_pool import HostGpus, HostsNodePool

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "configuration.md"
REFERENCE_NAME = "docs/configuration.md"
START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"
REGENERATE = "python -m tools.config_reference --write"

# Rules a field validator enforces (not visible in the type): what the reference says is accepted.
_FIELD_RULES: dict[tuple[type[BaseModel], str], str] = {
    (Settings, "kubernetes_version"): ", ".join(settings.SUPPORTED_KUBERNETES_MINORS),
    (settings.NodePool, "instance_type"): "a catalog GPU type; families: "
    + ", ".join(catalog.families()),
    (settings.NodePool, "driver_version"): ", ".join(settings.SUPPORTED_DRIVER_BRANCHES)
    + " (supported by the pool's GPU)",
    (HostsNodePool, "driver_version"): ", ".join(settings.SUPPORTED_DRIVER_BRANCHES)
    + " (supported by the pool's GPU)",
    (HostGpus, "model"): "a catalog GPU model: " + ", ".join(catalog.GPU_MODELS),
    (settings.DevicePlugin, "version"): "a release tag vX.Y.Z",
    (settings.Network, "cidr"): "IPv4 CIDR block, /16 to /24",
    (Settings, "ssh_private_key"): "an unencrypted PEM/OpenSSH private key",
}
# Validators used in `Annotated[...]` types, by function name: what they accept.
_VALIDATOR_RULES = {
    "_cidr": "CIDR block like 203.0.113.0/24",
    "_dns_label": "lowercase DNS label, at most 40 characters",
    "_host": "IP address without a zone index, or DNS name",
    "_host_key": "SSH host public key line, ssh-ed25519 or ecdsa-sha2-nistp*",
    "_login_key": "OpenSSH public key line, ssh-ed25519 or ssh-rsa of at least 3072 bits",
    "_own_group": "not a system: group",
    "_private_cidr": "private (RFC 1918 or 6598)",
    "_cni_port": "one CNI port: " + ", ".join(CNI_PORTS),
    "_endpoint": "host:port",
    "_image": "image pinned to a version tag or digest",
    "_label_key": "Kubernetes label key",
    "_label_value": "Kubernetes label value",
    "_tag_key": "AWS tag key (1 to 128 characters, not aws:*)",
    "_tag_value": "AWS tag value (at most 256 characters)",
}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    accepted: str
    description: str


# ---------------------------------------------------------------- reading the model


def _strip_annotated(annotation: Any) -> tuple[Any, list[Any]]:
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata.extend(extra)
    return annotation, metadata


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(inner, optional) for `X | None`."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) < len(typing.get_args(annotation)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True  # noqa: UP007
    return annotation, False


def _model_variants(annotation: Any) -> list[type[BaseModel]]:
    annotation, _ = _strip_annotated(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [
            a
            for a in (_strip_annotated(x)[0] for x in typing.get_args(annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
    return []


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _type_name(annotation: Any) -> str:
    annotation, _ = _strip_annotated(annotation)
    annotation, _ = _without_none(annotation)
    annotation, _ = _strip_annotated(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        kinds = {type(v) for v in typing.get_args(annotation)}
        return "string" if kinds == {str} else "value"
    if origin is list:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"map of {_type_name(key)} to {_type_name(value)}"
    if _model_variants(annotation):
        return "object"
    if annotation is SecretStr:
        return "secret string"
    if _is_model(annotation):
        return "object"
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _validator_rule(validator: AfterValidator) -> str | None:
    func = validator.func
    if func.__name__ in _VALIDATOR_RULES:
        return _VALIDATOR_RULES[func.__name__]
    # settings.fields._pattern(...) closures carry the text of what they accept.
    names = func.__code__.co_freevars
    if "expected" in names and func.__closure__:
        return func.__closure__[names.index("expected")].cell_contents
    return None


def _accepted(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    parts: list[str] = []
    ruled = (model, name) in _FIELD_RULES
    if ruled:
        parts.append(_FIELD_RULES[(model, name)])
    annotation, metadata = _strip_annotated(field.annotation)
    annotation, _ = _without_none(annotation)
    annotation, inner_meta = _strip_annotated(annotation)
    metadata = [*field.metadata, *metadata, *inner_meta]
    if typing.get_origin(annotation) is typing.Literal:
        parts.append(", ".join(f"`{v}`" for v in typing.get_args(annotation)))
    if typing.get_origin(annotation) in (list, dict):
        args = typing.get_args(annotation)
        item_meta = _strip_annotated(args[-1])[1]
        if typing.get_origin(annotation) is dict:
            item_meta = _strip_annotated(args[0])[1] + item_meta
        for meta in item_meta:
            if isinstance(meta, AfterValidator) and (rule := _validator_rule(meta)):
                parts.append(f"each: {rule}")
    low = next((m.ge for m in metadata if isinstance(m, Ge)), None)
    low = low if low is not None else next((m.gt for m in metadata if isinstance(m, Gt)), None)
    high = next((m.le for m in metadata if isinstance(m, Le)), None)
    high = high if high is not None else next((m.lt for m in metadata if isinstance(m, Lt)), None)
    if low is not None and high is not None:
        parts.append(f"{low} to {high}")
    elif low is not None:
        parts.append(f">= {low}")
    elif high is not None:
        parts.append(f"<= {high}")
    for meta in metadata:
        if isinstance(meta, MinLen) and meta.min_length:
            parts.append(f"at least {meta.min_length}")
        elif isinstance(meta, MaxLen):
            parts.append(f"at most {meta.max_length}")
        elif isinstance(meta, AfterValidator) and not ruled and (rule := _validator_rule(meta)):
            parts.append(rule)
    if annotation is bool:
        parts.append("`true`, `false`")
    return "; ".join(dict.fromkeys(parts))


def _show(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True, mode="json")
    elif isinstance(value, list):
        value = [
            v.model_dump(by_alias=True, mode="json") if isinstance(v, BaseModel) else v
            for v in value
        ]
    if value is None:
        return "unset"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{json.dumps(value, separators=(', ', ': '))}`"


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is PydanticUndefined:
        return "**required**"
    if isinstance(value, BaseModel):
        mode = getattr(value, "mode", None)
        return f"mode `{mode}` (see keys below)" if mode else "(see keys below)"
    return _show(value)


def rows(model: type[BaseModel] = Settings, prefix: str = "", note: str = "") -> Iterator[Row]:
    """Every key of `model`, depth first, in declaration order."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        if note and name == "mode":
            continue  # the discriminator has one row for all variants
        description = (field.description or "").strip()
        yield Row(
            key=key,
            type=_type_name(field.annotation),
            default=_default(field),
            accepted=_accepted(model, name, field),
            description=f"{note}{description}",
        )
        annotation, _ = _without_none(_strip_annotated(field.annotation)[0])
        annotation, _ = _strip_annotated(annotation)
        variants = _model_variants(annotation)
        if variants:
            yield from _union_rows(key, variants)
        elif _is_model(annotation):
            yield from rows(annotation, f"{key}.", note=note)
        elif typing.get_origin(annotation) is list:
            item = _strip_annotated(typing.get_args(annotation)[0])[0]
            if _model_variants(item):
                # A list of either kind (node pools): each kind's keys, said whose they are.
                for variant in _model_variants(item):
                    yield from rows(variant, f"{key}[].", note=f"({variant.kind}) ")
            elif _is_model(item):
                yield from rows(item, f"{key}[].", note=note)


def _union_rows(key: str, variants: list[type[BaseModel]]) -> Iterator[Row]:
    tags = [typing.get_args(v.model_fields["mode"].annotation)[0] for v in variants]
    descriptions = [v.model_fields["mode"].description or "" for v in variants]
    yield Row(
        key=f"{key}.mode",
        type="string",
        default="**required**",
        accepted=", ".join(f"`{t}`" for t in tags),
        description="; ".join(d.strip() for d in descriptions),
    )
    for tag, variant in zip(tags, variants, strict=True):
        yield from rows(variant, f"{key}.", note=f"(mode: {tag}) ")


# ---------------------------------------------------------------- Markdown


def _cell(text: str) -> str:
    escaped = text.replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [
        f"Every key of the `{PROJECT}:` namespace, generated from `components/settings/` by "
        f"`{REGENERATE}`.",
        "",
        "| Key | Type | Default | Accepted values | Description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows():
        cells = (f"`{row.key}`", row.type, row.default, row.accepted, row.description)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


class MarkersMissing(ValueError):
    pass


def current_block(text: str) -> str:
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise MarkersMissing(
            f"{REFERENCE_NAME} needs the markers {START} and {END} (in that order) around the "
            "config reference"
        )
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def rewrite(text: str) -> str:
    """`text` with the block between the markers replaced by the generated reference."""
    current_block(text)
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.config_reference", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {REFERENCE_NAME}'s block")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {REFERENCE_NAME} is stale")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(render())
        return 0
    text = REFERENCE.read_text(encoding="utf-8")
    try:
        updated = rewrite(text)
    except MarkersMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if updated != text:
            print(f"{REFERENCE_NAME} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        REFERENCE.write_text(updated, encoding="utf-8")
        print(f"{REFERENCE_NAME}: config reference updated")
    else:
        print(f"{REFERENCE_NAME}: config reference already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
