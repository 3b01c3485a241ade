"""See a stack's plan without a cloud: `python -m tools.preview <stack>`.

Runs the real program (`__main__.py`) under the recording harness with the stack's config file,
secrets replaced by marked placeholders (`<secret:SSH_PRIVATE_KEY>`, ...), and prints what
`pulumi preview` would: every resource as a tree with what it waits for, the chain of each GPU
node and the policy pack's verdict. It writes to `build/preview/<stack>/` each host step's
script (`scripts/`), every Kubernetes object (`manifests/`), the graph (`graph.dot`, and its
picture where Graphviz is installed) and the printed plan (`preview.txt`); docs/preview.md
lists them. Bad configuration stops it with the same message as `pulumi up` (no traceback, exit
code 1). It replaces the stack's directory only when it created it (the marker file
`.gpu-cluster-preview`); any other existing path is refused, never deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.settings.errors import SECRET_KEYS
from tools import graph_picture, lifecycle, policy_adapter
from tools.harness import mocks, stacks
from tools.harness.graph import Graph, Resource, Secret, unwrap
from tools.harness.stacks import PROJECT, ROOT, STACKS
from tools.parallelism import recommended_parallelism

OUT_ROOT = ROOT / "build" / "preview"
OUT_MARKER = ".gpu-cluster-preview"
COMMAND_TYPE = "command:remote:Command"

PLACEHOLDER_PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "<secret:SSH_PRIVATE_KEY>\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
PLACEHOLDER_SECRETS = {"sshPrivateKey": PLACEHOLDER_PRIVATE_KEY}
# What the control plane's steps print at `up` time, which the program parses: the same shape,
# secrets as placeholders, so no real token or kubeconfig can ever show up in a preview.
PLACEHOLDER_STDOUT: dict[str, Callable[[Any], str]] = {
    "-kubeconfig": lambda _args: "<secret:KUBECONFIG>\n# ca-cert-hash: sha256:" + "0" * 64,
}
# Step parameters that hold a secret the program derives from one (a join token, from its pool's
# seed, here the mocks' key): shown as a placeholder too.
MASKED_PARAMETERS = ("JOIN_TOKEN",)


@dataclass
class Preview:
    stack: str
    graph: Graph
    chains: dict[str, list[Resource]]
    policies: policy_adapter.PolicyReport
    out_dir: Path
    api: ApiReach | None = None
    artefacts: dict[str, list[Path]] = field(default_factory=dict)
    picture_notice: str = ""
    text: str = ""


class OutDirRefused(RuntimeError):
    """The artefact directory exists and was not created by this tool: it is left alone."""


@dataclass(frozen=True)
class ApiReach:
    """Where the kubeconfig's API address can be reached from: a private one only from inside
    the VPC (or over a VPN), so `pulumi up` of that stack needs a runner there."""

    private: bool
    note: str


def api_reachability(settings: Any, stack: str) -> ApiReach:
    from components.settings import ExistingControlPlane

    control_plane = settings.control_plane
    if isinstance(control_plane, ExistingControlPlane):
        host = str(control_plane.endpoint).rpartition(":")[0].strip("[]")
        try:
            private = not ipaddress.ip_address(host).is_global
        except ValueError:
            private = True  # a DNS name of the existing cluster: assume it resolves inside
        where = f"the existing cluster's endpoint {control_plane.endpoint}"
    else:
        private = not settings.network.connects_to_public_ips
        where = (
            "the control plane's private address (hosts reached through network.bastion)"
            if private
            else "the control plane's Elastic IP (open to controlPlane.apiAllowedCidrs)"
        )
    if private:
        return ApiReach(
            True,
            f"private: {where}; run `pulumi up` from inside the VPC (CI: the self-hosted "
            f"runner labelled gpu-cluster-{stack})",
        )
    return ApiReach(False, f"public: {where}; a hosted runner reaches it")


# ---------------------------------------------------------------- running the program


@contextlib.contextmanager
def _placeholder_stdout() -> Iterator[None]:
    saved = dict(mocks.COMMAND_STDOUT)
    mocks.COMMAND_STDOUT.clear()
    mocks.COMMAND_STDOUT.update(PLACEHOLDER_STDOUT)
    mocks.COMMAND_STDOUT.update({k: v for k, v in saved.items() if k not in PLACEHOLDER_STDOUT})
    try:
        yield
    finally:
        mocks.COMMAND_STDOUT.clear()
        mocks.COMMAND_STDOUT.update(saved)


def record(stack: str, config: Mapping[str, Any] | None = None) -> Graph:
    """Run the real program for a stack file with placeholder secrets; raises ConfigError."""
    overrides: dict[str, Any] = {
        # Encrypted values in the stack file are never read: placeholders stand in for them.
        key: None
        for key, value in stacks.stack_file(stack).items()
        if isinstance(value, dict) and "secure" in value
    }
    overrides.update(config or {})
    with _placeholder_stdout():
        return stacks.run_program(stack, config=overrides, secrets=PLACEHOLDER_SECRETS)


# ---------------------------------------------------------------- chains


def node_names(graph: Graph) -> list[str]:
    """The Kubernetes node names, from the stack's `nodePools` output."""
    pools = unwrap(graph.outputs.get("nodePools")) or {}
    return [name for pool in pools.values() for name in pool]


def chain_of(graph: Graph, node_name: str) -> list[Resource]:
    """The longest dependency path through the node's own resources (`<node>`, `<node>-*`)
    from its instance on: what the instance is made from (its generated host key) comes before
    the chain, as the pool's key pair and security group do. An existing host's chain starts at
    the copy of its scripts."""
    # An existing host has no resource of the node's own name: its chain starts at its scripts.
    machine = graph.find(lambda r: r.name == node_name)
    before = graph.ancestors(machine[0]) if machine else set()
    members = {
        r.urn: r
        for r in graph
        if r.custom
        and (r.name == node_name or r.name.startswith(f"{node_name}-"))
        and r.urn not in before
    }
    best: dict[str, list[str]] = {}
    order = graph.topological(members)
    for urn in order:
        deps = graph.direct_dependencies(members[urn]) & members.keys()
        longest = max((best[d] for d in deps), key=len, default=[])
        best[urn] = [*longest, urn]
    path = max(best.values(), key=len, default=[])
    return [members[u] for u in path]


def step_label(resource: Resource, node_name: str) -> str:
    if resource.name == node_name:
        return resource.type.rsplit(":", 1)[-1].lower()
    return resource.name[len(node_name) + 1 :]


# ---------------------------------------------------------------- policies


# ---------------------------------------------------------------- printing


def _display_names(graph: Graph) -> dict[str, str]:
    counts: dict[str, int] = {}
    for r in graph:
        counts[r.name] = counts.get(r.name, 0) + 1
    return {r.urn: r.name if counts[r.name] == 1 else f"{r.name} ({r.type})" for r in graph}


def render_tree(stack: str, graph: Graph) -> list[str]:
    names = _display_names(graph)
    children: dict[str | None, list[Resource]] = {}
    for r in graph:
        parent = r.parent if r.parent in graph.by_urn else None
        children.setdefault(parent, []).append(r)
    lines = [f"+ pulumi:pulumi:Stack  {PROJECT}-{stack}  create"]
    stack_items: list[tuple[Resource, int]] = [(r, 1) for r in reversed(children.get(None, []))]
    while stack_items:
        resource, depth = stack_items.pop()
        pad = "    " * depth
        lines.append(f"{pad}+ {resource.type}  {resource.name}  create")
        deps = sorted(names[d] for d in graph.direct_dependencies(resource))
        if deps:
            lines.append(f"{pad}    depends on: {', '.join(deps)}")
        stack_items.extend((c, depth + 1) for c in reversed(children.get(resource.urn, [])))
    return lines


def render_text(preview: Preview) -> str:
    graph = preview.graph
    lines = [
        f"Previewing {PROJECT}/{preview.stack} offline (the real program under the SDK's "
        "mocks; secrets are <secret:...> placeholders, cloud-assigned values are made up)",
        "",
        *render_tree(preview.stack, graph),
        "",
        "Resources:",
        f"    + {len(graph) + 1} to create",
        "",
        "Chains:",
    ]
    for node_name, chain in preview.chains.items():
        steps = " -> ".join(step_label(r, node_name) for r in chain)
        lines.append(f"    {node_name}: {steps}")
    nodes = len(preview.chains)
    lines += [
        "",
        f"Parallelism: {nodes} GPU node(s), each holding one engine slot for its whole chain: "
        f"pulumi up --parallel {recommended_parallelism(nodes)} "
        f"(python -m tools.parallelism {preview.stack}; the CLI's default is 4 x CPUs)",
    ]
    if preview.api is not None:
        lines += ["", f"Kubernetes API: {preview.api.note}"]
    report = preview.policies
    lines.append("")
    if not report.available:
        lines.append(f"Policies: not run ({report.note})")
    else:
        lines.append(f"Policies: {len(report.passed)} passed, {len(report.violations)} violations")
        lines.extend(f"    violation: {v}" for v in report.violations)
    lines.append("")
    lines.append(f"Artefacts in {_relative(preview.out_dir)}/:")
    for kind, paths in preview.artefacts.items():
        lines.append(f"    {kind}: {len(paths)}")
    if preview.picture_notice:
        lines.append(f"    {preview.picture_notice}")
    return "\n".join(lines) + "\n"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- artefacts


def _placeholders(value: Any, path: str = "") -> Any:
    """Inputs with every secret replaced by `<secret:path>` (manifests are shown, not secrets)."""
    if isinstance(value, Secret):
        return f"<secret:{path or 'value'}>"
    if isinstance(value, dict):
        return {k: _placeholders(v, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_placeholders(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _file_names(resources: Sequence[Resource]) -> dict[str, str]:
    counts: dict[str, int] = {}
    for r in resources:
        counts[r.name] = counts.get(r.name, 0) + 1
    out = {}
    for r in resources:
        stem = r.name if counts[r.name] == 1 else f"{r.name}.{r.type.rsplit(':', 1)[-1].lower()}"
        out[r.urn] = stem.replace("/", "_")
    return out


def write_scripts(graph: Graph, out_dir: Path) -> list[Path]:
    """Each host step's stdin (the rendered script: secret parameters are placeholders, since
    the program ran with placeholder secrets) and its delete command."""
    commands = graph.of_type(COMMAND_TYPE)
    stems = _file_names(commands)
    written = []
    for command in commands:
        inputs = command.inputs
        for suffix, key in ((".sh", "stdin"), (".delete.sh", "delete")):
            text = unwrap(inputs.get(key))
            if not text:
                continue
            for name in MASKED_PARAMETERS:
                text = re.sub(rf"(?m)^{name}=.*$", f"{name}='<secret:{name}>'", text)
            path = out_dir / f"{stems[command.urn]}{suffix}"
            path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
            written.append(path)
    return written


_MANIFEST_ORDER = ("apiVersion", "kind", "metadata")


def _keys_sorted(value: Any) -> Any:
    """`value` with the keys of every map in sorted order. The inputs arrive as protobuf
    Structs, whose maps have no order of their own (the order they iterate in changes with
    how the Struct was built or copied), so a manifest shows its keys sorted, the same from
    one run and one version to the next."""
    if isinstance(value, dict):
        return {k: _keys_sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_keys_sorted(v) for v in value]
    return value


def write_manifests(graph: Graph, out_dir: Path) -> list[Path]:
    objects = [r for r in graph if r.type.startswith("kubernetes:")]
    stems = _file_names(objects)
    written = []
    for resource in objects:
        inputs = _keys_sorted(_placeholders(resource.inputs))
        manifest = {k: inputs[k] for k in _MANIFEST_ORDER if k in inputs}
        manifest.update({k: v for k, v in inputs.items() if k not in manifest})
        path = out_dir / f"{stems[resource.urn]}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        written.append(path)
    return written


def prepare_out_dir(out: Path) -> None:
    """Empty the stack's artefact directory when this tool created it; refuse anything else."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutDirRefused(
            f"{out} exists and is not a directory this tool created; not touching it"
        )
    if out.exists():
        if not (out / OUT_MARKER).is_file():
            raise OutDirRefused(
                f"{out} exists and was not created by `python -m tools.preview` (no {OUT_MARKER} "
                "in it); not deleting it: choose another --out, or remove it yourself"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / OUT_MARKER).write_text("written by python -m tools.preview; replaced on each run\n")


def write_artefacts(preview: Preview) -> None:
    out = preview.out_dir
    prepare_out_dir(out)
    (out / "scripts").mkdir()
    (out / "manifests").mkdir()
    preview.artefacts["scripts"] = write_scripts(preview.graph, out / "scripts")
    preview.artefacts["manifests"] = write_manifests(preview.graph, out / "manifests")
    dot_text = graph_picture.to_dot(preview.graph, preview.chains)
    picture = graph_picture.render(dot_text, out)
    preview.artefacts["graph"] = list(picture.paths.values())
    preview.picture_notice = picture.notice


# ---------------------------------------------------------------- entry points


def preview(
    stack: str, *, config: Mapping[str, Any] | None = None, out_root: Path = OUT_ROOT
) -> Preview:
    """Record the stack's graph and write its artefacts; raises ConfigError on bad config and
    OutDirRefused for an artefact directory this tool did not create."""
    from components.settings.load import load_settings

    graph = record(stack, config)
    chains = {name: chain_of(graph, name) for name in node_names(graph)}
    result = Preview(
        stack=stack,
        graph=graph,
        chains=chains,
        policies=policy_adapter.run(graph),
        out_dir=out_root / stack,
        api=api_reachability(load_settings(), stack),  # the config the program just ran with
    )
    write_artefacts(result)
    result.text = render_text(result)
    (result.out_dir / "preview.txt").write_text(result.text, encoding="utf-8")
    return result


def record_deployed(stack: str, against: str) -> Graph:
    """The graph of what is deployed: `against` is either a stack file (run with this program)
    or a git ref (its program and its Pulumi.<stack>.yaml), with placeholder secrets."""
    path = Path(against)
    for candidate in (path, ROOT / path):
        if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
            config = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
            return _record_config(stack, dict(config.get("config") or {}), stacks.PROGRAM)
    with lifecycle.program_of(against) as checkout:
        config = lifecycle.stack_config_at(checkout, f"Pulumi.{stack}.yaml")
        return _record_config(stack, config, checkout / "__main__.py")


def _record_config(stack: str, config: Mapping[str, Any], program: Path) -> Graph:
    values = {k: v for k, v in config.items() if not (isinstance(v, dict) and "secure" in v)}
    with _placeholder_stdout():
        return stacks.run_program(
            stack,
            config=values,
            replace_config=True,
            secrets=PLACEHOLDER_SECRETS,
            program=program,
        )


def what_will_change(
    stack: str,
    against: str,
    config: Mapping[str, Any] | None = None,
    *,
    lost: Sequence[str] = (),
    replace: Sequence[str] = (),
) -> str:
    """The report of `--against`: what `pulumi up` of this version does to a stack deployed
    from `against`, per resource and per GPU node (tools/lifecycle.py); with `lost`, after a
    `pulumi refresh` found those machines gone, and with `replace`, as `pulumi up --replace`
    of those (tools/recovery.py)."""
    from tools import recovery

    before = record_deployed(stack, against)
    if lost:
        before = recovery.refreshed(before, lost)
    # `userData` is ignored after create: a deployed machine keeps what it booted with.
    deployed_without = {
        r.name for r in before.of_type("aws:ec2/instance:Instance") if "userData" not in r.inputs
    }
    with mocks.booted_without_user_data(deployed_without):
        after = record(stack, config)
    plan = lifecycle.plan(before, after, replace=replace)
    operation = "`pulumi up`"
    if lost:
        operation = f"`pulumi refresh` (which finds {', '.join(lost)} gone), then `pulumi up`,"
    if replace:
        operation = f"`pulumi up --replace` ({', '.join(replace)})"
    header = (
        f"What {operation} of {PROJECT}/{stack} does to the stack deployed from "
        f"{against} (offline: the two programs under the SDK's mocks, the providers' replace "
        "rules of tools/lifecycle.py):\n"
    )
    runs = recovery.render_runs(recovery.hook_runs(plan, before, after))
    exposed = "".join(f"WARNING: {line}\n" for line in recovery.exposed_boot_keys(plan))
    return header + lifecycle.render(plan) + runs + exposed


def main(argv: Sequence[str] | None = None) -> int:
    from components.settings.load import ConfigError

    parser = argparse.ArgumentParser(
        prog="python -m tools.preview",
        description="Offline `pulumi preview`: the plan of a stack file, no cloud needed.",
    )
    parser.add_argument("stack", help=f"stack name (Pulumi.<stack>.yaml), e.g. {', '.join(STACKS)}")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key for this preview, like `pulumi config set` (a string; "
        'objects and lists as JSON), e.g. --set \'devicePlugin={"migStrategy": "single"}\'',
    )
    parser.add_argument("--out", type=Path, default=OUT_ROOT, help="artefact root directory")
    parser.add_argument(
        "--against",
        metavar="GIT_REF_OR_STACK_FILE",
        help="instead of the plan, what this version changes in a stack deployed from a git ref "
        "(e.g. origin/main) or from another stack file: per resource replace / update / re-run "
        "/ unchanged / create / delete, per node drained / reset / re-joined",
    )
    parser.add_argument(
        "--lost",
        action="append",
        default=[],
        metavar="NAME",
        help="with --against: a machine (or any resource) a `pulumi refresh` found gone, e.g. a "
        "terminated GPU instance (its node's name); the plan is then that of refresh + up",
    )
    parser.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="NAME_OR_URN",
        help="with --against: a resource `pulumi up --replace` names (a GPU instance: its node's "
        "name or URN)",
    )
    args = parser.parse_args(argv)
    if (args.lost or args.replace) and not args.against:
        print(
            "error: --lost and --replace plan against a deployed stack: add --against",
            file=sys.stderr,
        )
        return 1
    if not stacks.stack_path(args.stack).is_file():
        print(f"error: no stack file Pulumi.{args.stack}.yaml in {ROOT}", file=sys.stderr)
        return 1
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 1
        name = key.removeprefix(f"{PROJECT}:")
        if name in SECRET_KEYS:
            # The preview always runs with a placeholder for a secret, so a value given here
            # would be dropped in silence; `pulumi up` refuses it as a plain value anyway.
            print(
                f"error: --set {key}: a secret is not taken from the command line (the preview "
                f"shows it as a placeholder); set it with `pulumi config set --secret "
                f"{PROJECT}:{name}`",
                file=sys.stderr,
            )
            return 1
        overrides[key] = raw
        if raw.lstrip().startswith(("{", "[")):
            try:
                overrides[key] = json.loads(raw)
            except json.JSONDecodeError:
                print(f"error: --set {key}: not valid JSON: {raw}", file=sys.stderr)
                return 1
    if args.against:
        try:
            sys.stdout.write(
                what_will_change(
                    args.stack, args.against, overrides, lost=args.lost, replace=args.replace
                )
            )
        except (ValueError, KeyError) as exc:  # an unknown git ref or name, or bad config
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        result = preview(args.stack, config=overrides, out_root=args.out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OutDirRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(result.text)
    return 1 if result.policies.violations else 0


if __name__ == "__main__":
    sys.exit(main())
