"""Hostile configuration values, and the checks that none of them runs as code (issue 41).

A hostile value carries a canary: a shell command that creates a file. Wherever the program
hands a value to a shell, the value is either refused by the settings (naming its key), or it
reaches the shell only as data; these helpers find every text a shell runs in a recorded graph
(a remote step's command line and stdin, a local Command's command line, stdin and environment,
a container's `sh -c`) and run the parts that hold configuration values, so a canary that
appears says exactly which value ran.

For the local Commands (where `pulumi up` runs, with the deploy job's credentials),
`local_commands` and `run_local_command` run a recorded local Command the way pulumi-command
does (its `create` through `/bin/sh -c`, its `environment` over the caller's, its `stdin`): a
test of the local scripts can feed them any value and look for the canary.
"""

from __future__ import annotations

import os
import re
import subprocess
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr

from tools.harness.graph import Graph, unwrap

ROOT = Path(__file__).resolve().parents[2]
# Part of every canary path: a value holding it is one of ours, wherever it shows up.
MARKER = "gpuclustercanary"

# Shell payloads, each creating the file {canary} when a shell evaluates the value as code. They
# cover the ways a value can escape: command substitution, a command separator, a quote that
# closes the one around it, a newline, an IPv6 zone index (the value of finding 1), an ssh
# option or a leading '-' (read as an option by the program that takes the value), and text a
# naive filter lets through (unicode look-alikes, NUL, a trailing newline).
PAYLOADS: tuple[str, ...] = (
    "$(touch {canary})",
    "`touch {canary}`",
    ";touch {canary}",
    "&&touch {canary}",
    "|touch {canary}",
    "'$(touch {canary})'",
    '"$(touch {canary})"',
    "'; touch {canary}; '",
    '"; touch {canary}; "',
    "\ntouch {canary}\n",
    "\rtouch {canary}",
    "fe80::1%h$(touch {canary})",
    "fe80::1%eth0;touch {canary}",
    "10.0.0.1%$(touch {canary})",
    "-oProxyCommand=touch {canary}",
    "-oProxyCommand=sh -c 'touch {canary}'",
    "x -oProxyCommand=touch${{IFS}}{canary}",
    "${{IFS}}touch${{IFS}}{canary}",
    "$'\\x74ouch' {canary}",
    "x\u2028touch {canary}",
    "ｘ$(touch {canary})",
    "x\0$(touch {canary})",
    "$(touch {canary})\n",
    "a.b$(touch {canary}).c",
    "ubuntu@$(touch {canary})",
    "#$(touch {canary})",
    ">{canary}",
    "<(touch {canary})",
    "*{canary}",
    "!{canary}",
)
# Characters that mean something to a shell, ssh or a YAML writer.
METACHARACTERS = "$`;&|'\"\n\r\t\\<>()*?!#%~{}[] =@\0\u2028"


# The file a payload creates, in the directory it runs in: a name without '/', which an
# address parser would refuse for the '/' alone (Python's IPv6Address does) and so hide the rest.
CANARY = f"{MARKER}-ran"


def canary_path(directory: Path) -> Path:
    """Where a payload that ran in `directory` left its canary."""
    return directory / CANARY


def payloads() -> list[str]:
    """Every payload, creating CANARY in the directory it runs in."""
    return [p.format(canary=CANARY) for p in PAYLOADS]


def hostile_strings() -> st.SearchStrategy[str]:
    """A payload as it stands, or a plausible value (an address, a name) with a payload or
    stray metacharacters put before, inside or after it."""
    plausible = st.sampled_from(
        ["10.0.1.10", "bastion.example.com", "ubuntu", "fe80::1", "a", "dev-gpu", "v0.20.0"]
    )
    payload = st.sampled_from(payloads())
    noise = st.text(alphabet=METACHARACTERS, min_size=1, max_size=3)
    return st.one_of(
        payload,
        st.tuples(plausible, payload).map("".join),
        st.tuples(payload, plausible).map("".join),
        st.tuples(plausible, noise, plausible).map("".join),
        st.tuples(noise, plausible).map("".join),
        st.text(min_size=1, max_size=12).map(lambda text: f"{text}$(touch {CANARY})"),
    )


_SHELL_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # shlex.quote leaves these unquoted


def shell_word(value: str) -> bool:
    """`value` is plain words to a shell as it stands: one, or a few separated by single
    spaces (a host key line: its type and base64), each with nothing to quote (per
    `shlex.quote`) and none taken for an option (no leading '-'). Unquoted, it splits into
    those words and nothing runs."""
    words = value.split(" ")
    return all(_SHELL_WORD.fullmatch(w) and not w.startswith("-") for w in words)


# ---------------------------------------------------------------- the configuration's fields


@dataclass(frozen=True)
class Field:
    """One place in the stack configuration a value can go: `path` (keys and list indexes;
    `KEY` stands for the key of a mapping), the stack file it is tried on."""

    path: tuple[str | int, ...]
    stack: str

    @property
    def name(self) -> str:
        text = ""
        for part in self.path:
            if isinstance(part, int):
                text += f"[{part}]"
            else:
                text += f".{part}" if text else part
        return text

    def config(self, value: Any, base: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """(top-level overrides putting `value` at this field of `base`, the key path a problem
        about it names)."""
        top = self.path[0]
        assert isinstance(top, str)
        tree: Any = {top: _copy(base.get(f"gpu-cluster:{top}"))}
        node, key = tree, ""
        for index, part in enumerate(self.path):
            last = index == len(self.path) - 1
            if part in (KEY, VALUE):
                entry_key, entry_value = ENTRIES.get(self.path[:index], ("hostile", "x"))
                if part == KEY:
                    entry_key = value
                else:
                    entry_value = value
                node[entry_key] = entry_value
                key += f".{entry_key}"
                return tree, key
            if isinstance(part, int):
                key += f"[{part}]"
                if last:
                    node[part] = value
                else:
                    node = node[part]
                continue
            key += f".{part}" if key else part
            if last:
                node[part] = value
                continue
            following = self.path[index + 1]
            if isinstance(following, int):
                if not isinstance(node.get(part), list) or not node[part]:
                    node[part] = [_copy(_ITEMS.get(self.path[: index + 1], ""))]
            elif not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        return tree, key


# A valid first item of the lists whose items' fields are tried, where a stack file has none.
_ITEMS: dict[tuple[str | int, ...], Any] = {
    ("nodePools", 0, "taints"): {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
}
KEY = "<key>"  # the key of a mapping's entry
VALUE = "<value>"  # the value of a mapping's entry
# A valid entry of the mappings whose keys or values are checked as such (the other's hostile).
ENTRIES: dict[tuple[str | int, ...], tuple[str, str]] = {
    ("hostKeys",): (
        "i-0123456789abcdef0",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOBDTt8M+hE1cCPbLyfkqiRG15dpfzxOyAA+P+Vm1S28",
    ),
}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _variants(annotation: Any) -> list[Any]:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [_unwrap(a) for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def model_fields(model: type[BaseModel], prefix: tuple[str | int, ...] = ()) -> Iterator[tuple]:
    """Every leaf of the settings model under `prefix`: (path, the model that holds it)."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        for variant in _variants(info.annotation):
            yield from _leaves(variant, (*prefix, key), model)


def _leaves(annotation: Any, path: tuple[str | int, ...], owner: Any) -> Iterator[tuple]:
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from model_fields(annotation, path)
    elif origin is list:
        (item,) = typing.get_args(annotation)
        for variant in _variants(item):
            yield from _leaves(variant, (*path, 0), owner)
    elif origin is dict:
        yield (*path, KEY), owner
        yield (*path, VALUE), owner
    else:
        yield path, owner


def configuration_fields() -> list[Field]:
    """Every field of the stack configuration, each on the stack file that reaches it: the
    managed control plane's on dev, the existing one's, the bastion's and an existing VPC's on
    prod, a pool of existing hosts' on onprem (tests/stacks, its first pool), the rest on dev
    and prod. A mapping's keys and values are fields of their own."""
    from components.settings import ExistingControlPlane, ManagedControlPlane, Settings
    from components.settings.hosts_pool import ExistingHost, HostGpus, HostsNodePool

    fields: list[Field] = []
    seen: set[tuple[tuple, str]] = set()
    for path, owner in model_fields(Settings):
        path = tuple(path)
        if path == ("sshPrivateKey",):
            continue  # a secret, set as one (tests/test_hostile_values.py tries it apart)
        if owner is ManagedControlPlane:
            stacks = ("dev",)
        elif owner in (HostsNodePool, ExistingHost, HostGpus):
            stacks = ("onprem",)
        elif owner is ExistingControlPlane or path[:2] == ("network", "bastion"):
            stacks = ("prod",)
        else:
            stacks = ("dev", "prod")
        for stack in stacks:
            if (path, stack) not in seen:
                seen.add((path, stack))
                fields.append(Field(path, stack))
    return fields


def secret_value(value: SecretStr | str) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


# ---------------------------------------------------------------- what shells run


@dataclass(frozen=True)
class ShellText:
    """A text a shell runs: its resource, where in it, the text."""

    resource: str
    where: str
    text: str


def shell_texts(graph: Graph) -> list[ShellText]:
    """Every text of the graph a shell runs: remote and local commands' command lines and
    stdin, local commands' environment values, containers' `sh -c`/`bash -c` scripts."""
    found: list[ShellText] = []
    for resource in graph:
        inputs = unwrap(resource.inputs)
        if resource.type in ("command:remote:Command", "command:local:Command"):
            for where in ("create", "update", "delete", "stdin"):
                if isinstance(inputs.get(where), str):
                    found.append(ShellText(resource.name, where, inputs[where]))
            for name, value in (inputs.get("environment") or {}).items():
                found.append(ShellText(resource.name, f"environment.{name}", str(value)))
        elif resource.type.startswith("kubernetes:"):
            for where, script in _container_scripts(inputs):
                found.append(ShellText(resource.name, where, script))
    return found


def _container_scripts(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        command = [*value.get("command", []), *value.get("args", [])] if "image" in value else []
        for index, part in enumerate(command[:-1]):
            shell = str(command[index - 1]).rsplit("/", 1)[-1] if index else ""
            if part == "-c" and shell in ("sh", "bash"):
                yield f"{path}.command", str(command[index + 1])
        for key, item in value.items():
            yield from _container_scripts(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _container_scripts(item, f"{path}[{index}]")


def inputs_block(program: str) -> str:
    """The lines of a step's program before its run (components/hosts/remote.py `step_program`:
    a comment, `set +x`, the NAME='value' parameters, then `STEP_BUNDLE=`), or of a delete hook
    (`... bash -s <<'GPU_CLUSTER_SCRIPT'` and that program)."""
    body = program
    marker = "<<'GPU_CLUSTER_SCRIPT'\n"
    if marker in body:
        body = body.split(marker, 1)[1]
    end = body.find("\nSTEP_BUNDLE=")
    return body if end < 0 else body[: end + 1]


def run_inputs(program: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run `inputs_block(program)` with bash in `workdir`, as the host would before anything
    else: a value that breaks out of its quotes runs here."""
    return subprocess.run(
        ["bash", "-c", inputs_block(program) + "\ndeclare -p >/dev/null\n"],
        cwd=workdir,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# ---------------------------------------------------------------- the local Commands


@dataclass(frozen=True)
class LocalCommand:
    """A recorded pulumi-command local Command: what it runs, its stdin and environment."""

    name: str
    create: str
    stdin: str
    environment: dict[str, str]


def local_commands(graph: Graph) -> list[LocalCommand]:
    found = []
    for resource in graph.of_type("command:local:Command"):
        inputs = unwrap(resource.inputs)
        found.append(
            LocalCommand(
                resource.name,
                inputs["create"],
                inputs.get("stdin") or "",
                {k: str(v) for k, v in (inputs.get("environment") or {}).items()},
            )
        )
    return found


def run_local_command(
    command: LocalCommand,
    *,
    workdir: Path,
    overrides: dict[str, str] | None = None,
    timeout: int = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `command` as pulumi-command runs a local Command's create (provider/pkg/provider/
    local/commandController.go: `/bin/sh -c <create>` in the program's directory, the
    provider's environment plus `environment`, `stdin` on stdin), with `overrides` on top of its
    environment (a short DIAL_SECONDS, say). It runs in `workdir`, which stands for the
    program's directory (its `components` links to the repository's), so a canary lands there;
    HOME and TMPDIR are there too."""
    link = workdir / "components"
    if not link.exists():
        link.symlink_to(ROOT / "components")
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        **command.environment,
        **(overrides or {}),
    }
    return subprocess.run(
        ["/bin/sh", "-c", command.create],
        cwd=workdir,
        env=environment,
        input=command.stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def runs_nothing(graph: Graph, workdir: Path) -> int:
    """Assert that no hostile value of `graph` runs: each shell text holding a canary-carrying
    value holds it in a step program's parameters only, which run in `workdir` without effect;
    a local Command's environment holds it as plain words only; no other shell text holds it.
    Returns how many texts held one."""
    held = 0
    for text in shell_texts(graph):
        if MARKER not in text.text:
            continue
        held += 1
        where = f"{text.resource} {text.where}"
        if text.where in ("stdin", "delete"):
            block = inputs_block(text.text)
            assert MARKER not in text.text.replace(block, "", 1), f"{where}: outside the inputs"
            ran = run_inputs(text.text, workdir)
            assert ran.returncode == 0, (where, ran.stderr)
        elif text.where.startswith("environment."):
            assert shell_word(text.text), f"{where}: {text.text!r} reaches a local shell"
        else:
            raise AssertionError(f"{where}: a hostile value in a shell text: {text.text[:200]!r}")
    assert not canary_path(workdir).exists(), "a hostile value ran"
    return held
