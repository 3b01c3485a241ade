"""Run the real program in-process under the Pulumi SDK's mocks and return what the engine got.

`run_program("dev")` loads `Pulumi.dev.yaml` (plus test secrets), runs `__main__.py` with
`preview=False` against a `RecordingMonitor`, and returns a `Graph` of every
`RegisterResourceRequest`: type, name, URN, parent, dependencies, property dependencies, provider,
inputs (secret-ness kept), custom timeouts, additional secret outputs and replace-on-changes.
Those are the fields the real engine receives, so assertions on them hold for real deployments.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import runpy
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from google.protobuf import json_format
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.stack import massage, run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "__main__.py"
PROJECT = "gpu-cluster"
STACKS = ("dev", "staging", "prod")

_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _test_private_key() -> str:
    """A syntactically valid OpenSSH private key that opens nothing (tests never dial)."""
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ"
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"


TEST_SECRETS = {"sshPrivateKey": _test_private_key()}

# The steps of every GPU node after its instance, in contract order (resource `<node>-<step>`),
# then the validation steps when validation is enabled.
HOST_CHAIN = (
    "wait-ready",
    "nouveau",
    "driver",
    "runtime",
    "kube-tools",
    "join-token",
    "join",
    "node-ready",
)
VALIDATION_CHAIN = ("gpu-capacity", "validation-job")

# The least a stack must say: the rest comes from the defaults in code. Where the operator
# connects from has no default: it is theirs to name.
MINIMAL_STACK = {
    "gpu-cluster:clusterName": "mini",
    "gpu-cluster:ssh": {"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA ops@example"},
    "gpu-cluster:nodePools": [{"name": "a", "instanceType": "g5.xlarge", "count": 1}],
    "gpu-cluster:network": {"sshAllowedCidrs": ["203.0.113.0/24"]},
    "gpu-cluster:controlPlane": {"mode": "managed", "apiAllowedCidrs": ["203.0.113.0/24"]},
}


@dataclass(frozen=True)
class Secret:
    """An input the program marked secret; `value` is what it wraps."""

    value: Any


@dataclass
class Resource:
    type: str
    name: str
    urn: str
    parent: str | None
    custom: bool
    dependencies: set[str]
    property_dependencies: dict[str, set[str]]
    provider: str | None
    inputs: dict[str, Any]
    custom_timeouts: dict[str, str]
    additional_secret_outputs: list[str]
    replace_on_changes: list[str]
    delete_before_replace: bool
    ignore_changes: list[str]
    protect: bool
    aliases: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def provider_urn(self) -> str | None:
        return self.provider.rsplit("::", 1)[0] if self.provider else None

    def plain_inputs(self) -> dict[str, Any]:
        """The inputs with secret wrappers removed (for asserting on values)."""
        return unwrap(self.inputs)


def unwrap(value: Any) -> Any:
    if isinstance(value, Secret):
        return unwrap(value.value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def secret_paths(value: Any, path: str = "") -> list[str]:
    """Paths (like `connection.privateKey`) of the values that are marked secret."""
    if isinstance(value, Secret):
        return [path or "."]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += secret_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += secret_paths(item, f"{path}[{index}]")
    return found


def plain_strings(value: Any) -> Iterator[str]:
    """Every string NOT under a secret marker: where a leaked secret would show up."""
    if isinstance(value, Secret):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from plain_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from plain_strings(item)


def script_params(resource: Resource) -> dict[str, str]:
    """The NAME='value' inputs of the script a host step renders on stdin (secrets unwrapped)."""
    stdin = unwrap(resource.inputs["stdin"])
    header = stdin.split("# ---- lib/common.sh", 1)[0]
    found = {}
    for line in header.splitlines():
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        if match:
            found[match.group(1)] = shlex.split(match.group(2))[0] if match.group(2) else ""
    return found


class Graph:
    """The registered resources of one program run, and questions about their order."""

    def __init__(self, resources: list[Resource], stack_outputs: dict[str, Any]):
        self.resources = resources
        self.by_urn = {r.urn: r for r in resources}
        self.outputs = stack_outputs

    def __iter__(self) -> Iterator[Resource]:
        return iter(self.resources)

    def __len__(self) -> int:
        return len(self.resources)

    def of_type(self, type_: str) -> list[Resource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> Resource:
        found = [r for r in self.resources if r.name == name]
        if len(found) != 1:
            names = sorted(r.name for r in self.resources)
            raise KeyError(f"{len(found)} resources named {name!r}; names: {names}")
        return found[0]

    def find(self, predicate: Callable[[Resource], bool]) -> list[Resource]:
        return [r for r in self.resources if predicate(r)]

    def children(self, parent: Resource) -> list[Resource]:
        return [r for r in self.resources if r.parent == parent.urn]

    def direct_dependencies(self, resource: Resource) -> set[str]:
        """URNs the engine waits for before this resource: explicit and property dependencies,
        and the provider it is created with."""
        deps = set(resource.dependencies)
        for urns in resource.property_dependencies.values():
            deps |= urns
        if resource.provider_urn and resource.provider_urn in self.by_urn:
            deps.add(resource.provider_urn)
        return deps & self.by_urn.keys()

    def depends_on(self, a: Resource, b: Resource) -> bool:
        """True when `a` waits, directly or transitively, for `b`."""
        return b.urn in self.ancestors(a)

    def ancestors(self, resource: Resource) -> set[str]:
        seen: set[str] = set()
        stack = [resource.urn]
        while stack:
            for dep in self.direct_dependencies(self.by_urn[stack.pop()]):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def longest_paths(self, resources: Iterable[Resource] | None = None) -> dict[str, list[str]]:
        """URN -> the URNs of the longest dependency chain ending there, for `resources` (default:
        all) and everything they depend on. Iterative post-order DFS with one shared memo, so
        1,000-node graphs take one pass and never hit the recursion limit."""
        memo: dict[str, list[str]] = {}
        for start in self.resources if resources is None else resources:
            stack: list[tuple[str, bool]] = [(start.urn, False)]
            while stack:
                urn, done = stack.pop()
                if urn in memo:
                    continue
                deps = self.direct_dependencies(self.by_urn[urn])
                if done:
                    best = max((memo[d] for d in deps), key=len, default=[])
                    memo[urn] = [*best, urn]
                    continue
                stack.append((urn, True))
                stack.extend((d, False) for d in deps if d not in memo)
        return memo

    def longest_path(self, resource: Resource) -> list[Resource]:
        """The longest chain of dependencies that ends at `resource` (its depth in the plan)."""
        return [self.by_urn[u] for u in self.longest_paths([resource])[resource.urn]]

    def depth(self) -> int:
        """Resources on the longest dependency chain of the whole graph."""
        return max((len(path) for path in self.longest_paths().values()), default=0)

    def secret_inputs(self, resource: Resource) -> list[str]:
        return secret_paths(resource.inputs)


# ---------------------------------------------------------------- mocks


def _fake_id(prefix: str, name: str, length: int = 17) -> str:
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:length]


def _fake_ip(prefix: str, name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"{prefix}.{digest[0] % 250 + 2}.{digest[1] % 250 + 2}"


def _join_token_stdout(args: pulumi_mocks.MockResourceArgs) -> str:
    """What mint-join-token.sh prints: one JSON line, a bootstrap token unique to the node."""
    digest = hashlib.sha256(args.name.encode()).hexdigest()
    token = f"{digest[:6]}.{digest[6:22]}"
    ca_hash = "sha256:" + hashlib.sha256(b"test cluster CA").hexdigest()
    return json.dumps({"token": token, "caCertHash": ca_hash}) + "\n"


def _kubeconfig_stdout(args: pulumi_mocks.MockResourceArgs) -> str:
    """What read-kubeconfig.sh prints: an admin kubeconfig with fake, recognisable credentials
    (tests look for FAKE-TEST-ADMIN-KEY in plain inputs and outputs to catch a leak)."""
    fake = base64.b64encode(f"FAKE-TEST-ADMIN-KEY for {args.name}".encode()).decode()
    ca = base64.b64encode(b"FAKE-TEST-CA").decode()
    return (
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n"
        f"    certificate-authority-data: {ca}\n    server: https://203.0.113.10:6443\n"
        "  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n"
        "    user: kubernetes-admin\n  name: kubernetes-admin@kubernetes\n"
        "current-context: kubernetes-admin@kubernetes\nusers:\n- name: kubernetes-admin\n"
        f"  user:\n    client-certificate-data: {fake}\n    client-key-data: {fake}\n"
    )


# Outputs of host steps whose stdout the program parses, keyed by the end of the resource name.
COMMAND_STDOUT: dict[str, Callable[[pulumi_mocks.MockResourceArgs], str]] = {
    "-join-token": _join_token_stdout,
    "-kubeconfig": _kubeconfig_stdout,
}


class Mocks(pulumi_mocks.Mocks):
    """Plausible provider answers: every output a component reads has a value, so no
    dependency edge is lost to a missing output."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        state = dict(args.inputs)
        name, typ = args.name, args.typ
        if typ == "aws:ec2/instance:Instance":
            state.update(
                publicIp=_fake_ip("198.51", name),
                privateIp=_fake_ip("10.42", name),
                privateDns=f"ip-{_fake_ip('10-42', name).replace('.', '-')}.ec2.internal",
                arn=f"arn:aws:ec2:us-west-2:123456789012:instance/{_fake_id('i-', name)}",
            )
            return _fake_id("i-", name), state
        if typ == "aws:ec2/eip:Eip":
            state.update(publicIp=_fake_ip("203.0", name), allocationId=_fake_id("eipalloc-", name))
            return _fake_id("eipalloc-", name), state
        if typ == "aws:ec2/vpc:Vpc":
            return _fake_id("vpc-", name), state
        if typ == "aws:ec2/subnet:Subnet":
            return _fake_id("subnet-", name), state
        if typ == "aws:ec2/securityGroup:SecurityGroup":
            return _fake_id("sg-", name), state
        if typ == "aws:ec2/keyPair:KeyPair":
            state.update(keyName=state.get("keyName") or name)
            return _fake_id("key-", name), state
        if typ == "command:remote:Command":
            for suffix, make in COMMAND_STDOUT.items():
                if name.endswith(suffix):
                    state["stdout"] = make(args)
                    break
            else:
                state.setdefault("stdout", "")
            state.setdefault("stderr", "")
            # A (re)created command gets a new id, as with the real provider: the id follows
            # the triggers, so a step chained after a re-run step sees a changed trigger.
            triggers = json.dumps(args.inputs.get("triggers"), sort_keys=True, default=str)
            return _fake_id("cmd-", f"{name}|{triggers}", 12), state
        if typ == "kubernetes:batch/v1:Job":
            # pulumi-kubernetes returns a Job only once it has completed (it awaits the
            # Complete condition and fails on Failed), so a created Job reports success.
            state.setdefault(
                "status",
                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
            )
        return _fake_id(f"{name}-", name, 8), state

    def call(self, args: pulumi_mocks.MockCallArgs):
        token, inputs = args.token, args.args
        if token == "aws:ec2/getAmi:getAmi":
            name_filter = next(
                (f["values"][0] for f in inputs.get("filters", []) if f["name"] == "name"), "ami"
            )
            return {
                "id": _fake_id("ami-", name_filter),
                "name": name_filter,
                "architecture": "x86_64",
            }
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return {
                "names": ["us-west-2a", "us-west-2b", "us-west-2c"],
                "zoneIds": ["usw2-az1", "usw2-az2", "usw2-az3"],
            }
        if token == "aws:index/getRegion:getRegion":
            return {"name": "us-west-2", "region": "us-west-2"}
        if token == "aws:ec2/getVpc:getVpc":
            return {"id": inputs.get("id"), "cidrBlock": "10.0.0.0/16"}
        if token == "aws:ec2/getSubnet:getSubnet":
            subnet = inputs.get("id", "subnet-0")
            index = int(hashlib.sha256(subnet.encode()).hexdigest(), 16) % 3
            return {
                "id": subnet,
                "vpcId": "vpc-0a1b2c3d4e5f60718",
                "cidrBlock": f"10.0.{index + 1}.0/24",
                "availabilityZone": f"us-west-2{'abc'[index]}",
            }
        return {}


ROOT_STACK_TYPE = "pulumi:pulumi:Stack"


def engine_urn(parent: str | None, type_: str, name: str, *, project: str, stack: str) -> str:
    """The URN the engine gives a resource (pulumi/pulumi `pkg/resource/deploy/deployment.go`,
    `generateURN`): the parent's *whole* qualified type, then `$` and the resource's type; no
    parent type for the root stack. The SDK's MockMonitor.make_urn differs on both counts (it
    keeps only the parent's last type and puts the root stack's type in front), so a snapshot of
    its URNs would not be the identities a running stack has."""
    qualified = type_
    if parent:
        parent_qualified = parent.split("::")[2]
        if parent_qualified != ROOT_STACK_TYPE:
            qualified = f"{parent_qualified}${type_}"
    return f"urn:pulumi:{stack}::{project}::{qualified}::{name}"


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, recording each registration request as the engine would see it."""

    def __init__(self, mocks: pulumi_mocks.Mocks):
        super().__init__(mocks)
        self.recorded: list[Resource] = []
        self.outputs_by_urn: dict[str, dict[str, Any]] = {}

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if type_ == ROOT_STACK_TYPE:
            return super().make_urn(parent, type_, name)
        return engine_urn(
            parent or None,
            type_,
            name,
            project=runtime_settings.get_project(),
            stack=runtime_settings.get_stack(),
        )

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        timeouts = request.customTimeouts
        self.recorded.append(
            Resource(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent or None,
                custom=request.custom,
                dependencies=set(request.dependencies),
                property_dependencies={
                    key: set(deps.urns) for key, deps in request.propertyDependencies.items()
                },
                provider=request.provider or None,
                inputs=_decode(json_format.MessageToDict(request.object)),
                custom_timeouts={
                    k: v
                    for k, v in (
                        ("create", timeouts.create),
                        ("update", timeouts.update),
                        ("delete", timeouts.delete),
                    )
                    if v
                },
                additional_secret_outputs=list(request.additionalSecretOutputs),
                replace_on_changes=list(request.replaceOnChanges),
                delete_before_replace=request.deleteBeforeReplace,
                ignore_changes=list(request.ignoreChanges),
                protect=request.protect,
                # Alias specs (or URNs) as the engine receives them; tests/identity.py resolves
                # them the way the engine's step generator does.
                aliases=[
                    {"urn": alias.urn} if alias.urn else json_format.MessageToDict(alias.spec)
                    for alias in request.aliases
                ]
                + [{"urn": urn} for urn in request.aliasURNs],
            )
        )
        return response

    def RegisterResourceOutputs(self, request):
        self.outputs_by_urn[request.urn] = _decode(json_format.MessageToDict(request.outputs))
        return super().RegisterResourceOutputs(request)


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return Secret(_decode(value.get("value")))
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# ---------------------------------------------------------------- running the program


@cache
def stack_file(stack: str) -> dict[str, Any]:
    """The `config:` of Pulumi.<stack>.yaml, as written."""
    data = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


def engine_config(
    values: Mapping[str, Any], secrets: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Config as the CLI hands it to a program: every value a string, objects as JSON."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        flat[key] = value if isinstance(value, str) else json.dumps(value)
    secret_keys = []
    for key, value in secrets.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        flat[full] = value
        secret_keys.append(full)
    return flat, secret_keys


def set_stack_config(
    stack: str = "dev",
    *,
    config: Mapping[str, Any] | None = None,
    replace_config: bool = False,
    secrets: Mapping[str, str] | None = None,
) -> None:
    """Make the engine config what `pulumi up` on this stack would see (plus overrides)."""
    values: dict[str, Any] = {} if replace_config else dict(stack_file(stack))
    for key, value in (config or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = value
    flat, secret_keys = engine_config(values, TEST_SECRETS if secrets is None else secrets)
    runtime_config.set_all_config(flat, secret_keys)


def load_stack_settings(stack: str = "dev", **kwargs: Any):
    """Only the loader (no program run): the validated Settings, or ConfigError."""
    from components.config import load_settings

    set_stack_config(stack, **kwargs)
    return load_settings()


def run_program(
    stack: str = "dev",
    *,
    config: Mapping[str, Any] | None = None,
    replace_config: bool = False,
    secrets: Mapping[str, str] | None = None,
    program: Path | Callable[[], None] = PROGRAM,
) -> Graph:
    """Run the program for a stack file and return its registered graph.

    `config` overrides (or with `replace_config`, replaces) keys of Pulumi.<stack>.yaml; keys may
    be given without the `gpu-cluster:` prefix. `secrets` default to a test SSH key.
    """
    set_stack_config(stack, config=config, replace_config=replace_config, secrets=secrets)
    runtime_settings.ROOT.set(None)
    mocks = Mocks()
    monitor = RecordingMonitor(mocks)
    pulumi_mocks.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    runtime_settings.SETTINGS.outputs.clear()

    def main() -> None:
        if callable(program):
            program()
        else:
            runpy.run_path(str(program), run_name="__main__")
        # set_mocks registered the root stack's (empty) outputs before the program ran; register
        # what the program exported, as `pulumi up` does when the program returns.
        root = runtime_settings.get_root_resource()
        if root is not None and getattr(root, "outputs", None):
            root.register_outputs(massage(root.outputs, []))

    _sync_await(run_pulumi_func(main))
    stack_urn = f"urn:pulumi:{stack}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{stack}"
    for resource in monitor.recorded:
        resource.outputs = monitor.outputs_by_urn.get(resource.urn, {})
    return Graph(monitor.recorded, monitor.outputs_by_urn.get(stack_urn, {}))
