"""What a later `pulumi up` does to a running stack: two recorded graphs (the program before and
after a change) and the providers' own replace rules give, per resource, replace / update /
re-run / unchanged / create / delete, and per GPU node whether it is drained, reset or re-joined.

The engine's steps are modelled: a new URN is created, a gone one deleted, otherwise a changed
input the provider forces a new resource for (`FORCE_NEW`, each with its source) or one in
`replaceOnChanges` replaces, and the replacement cascades through `propertyDependencies`.
Commands: a changed `triggers` replaces; any other change is an update that runs `update`.

Why: docs/decisions/017-the-day-two-plan-applies-the-providers-rules.md
"""

from __future__ import annotations

import contextlib
import enum
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.aws import machines
from components.hosts import steps
from tools.harness import identity
from tools.harness.graph import Graph, Resource, script_params, unwrap
from tools.harness.stacks import ROOT

COMMAND = "command:remote:Command"
NO_OP_UPDATE = "true"

# Inputs whose change makes the provider replace the resource. Only what this program sets.
FORCE_NEW: Mapping[str, frozenset[str]] = {
    # The program's own list (components/aws/machines.py FORCE_NEW_INPUTS, with its source),
    # and root_block_device.encrypted/kms_key_id (ForceNew; root volume size and type are
    # modified in place).
    "aws:ec2/instance:Instance": machines.FORCE_NEW_INPUTS
    | frozenset({"rootBlockDevice.encrypted", "rootBlockDevice.kmsKeyId"}),
    # terraform-provider-aws internal/service/ec2/ec2_key_pair.go: key_name, key_name_prefix and
    # public_key are ForceNew; Update handles tags only. Pulumi auto-names `keyName`, so the
    # replacement has a new name.
    "aws:ec2/keyPair:KeyPair": frozenset({"publicKey", "keyName", "keyNamePrefix"}),
    # terraform-provider-aws internal/service/ec2/vpc_security_group.go: name, name_prefix,
    # description and vpc_id are ForceNew (rules are updated in place).
    "aws:ec2/securityGroup:SecurityGroup": frozenset(
        {"name", "namePrefix", "description", "vpcId"}
    ),
    # terraform-provider-aws internal/service/ec2/vpc_subnet.go and vpc_.go: the CIDR block,
    # availability zone and VPC of a subnet, the CIDR block of a VPC.
    "aws:ec2/subnet:Subnet": frozenset({"vpcId", "cidrBlock", "availabilityZone"}),
    "aws:ec2/vpc:Vpc": frozenset({"cidrBlock"}),
    # pulumi-command provider/pkg/provider/common/inputs.go: Triggers `replaceOnChanges`.
    COMMAND: frozenset({"triggers"}),
    # pulumi-kubernetes provider/pkg/provider/diff.go (forceNewProperties): a Job's pod template
    # and selector are immutable.
    "kubernetes:batch/v1:Job": frozenset({"spec.template", "spec.selector"}),
}
# Every Kubernetes object: its name and namespace are its identity (pulumi-kubernetes diff.go).
KUBERNETES_FORCE_NEW = frozenset({"metadata.name", "metadata.namespace"})


class Action(enum.Enum):
    CREATE = "create"
    DELETE = "delete"
    REPLACE = "replace"
    UPDATE = "update"  # inputs change, the provider updates in place
    RERUN = "re-run"  # a Command update that runs its script again on the same host
    UNCHANGED = "unchanged"
    BLOCKED = "blocked"  # a replacement of a protected resource: the engine stops the update


@dataclass(frozen=True)
class Change:
    urn: str
    name: str
    type: str
    action: Action
    changed: tuple[str, ...] = ()  # input paths that differ (or follow a replaced dependency)
    reason: str = ""


@dataclass
class NodeImpact:
    node: str
    drained: bool = False
    reset: bool = False
    rejoined: bool = False
    disrupted: list[str] = field(default_factory=list)  # disruptive steps re-run on the host
    # GPU Jobs (CUDA validation, NCCL) replaced on a node that is neither new nor rolled: each
    # requests every GPU of the node while it is in service.
    revalidated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        words = [w for w, on in (("drained", self.drained), ("reset", self.reset)) if on]
        if self.rejoined:
            words.append("re-joined")
        if self.disrupted:
            words.append(f"re-runs {', '.join(self.disrupted)}")
        if self.revalidated:
            words.append(f"re-validated in service ({', '.join(self.revalidated)})")
        return ", ".join(words) or "untouched"


@dataclass
class Plan:
    changes: list[Change]
    nodes: dict[str, NodeImpact]
    # Updates the provider or the cloud will refuse, each said in a sentence.
    refused: list[str] = field(default_factory=list)

    def by_action(self, *actions: Action) -> list[Change]:
        return [c for c in self.changes if c.action in actions]

    def named(self, name: str) -> Change:
        found = [c for c in self.changes if c.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} changes named {name!r}")
        return found[0]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for change in self.changes:
            out[change.action.value] = out.get(change.action.value, 0) + 1
        return out


# ---------------------------------------------------------------- diffing inputs


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: value}


def _changed_paths(old: Resource, new: Resource) -> set[str]:
    """The input paths that differ, after the engine applied `ignoreChanges` to the new inputs
    (the old value at an ignored path is kept, also where the new inputs have none)."""
    new_inputs = unwrap(new.inputs)
    old_inputs = unwrap(old.inputs)
    for path in new.ignore_changes:
        new_inputs = _with_old_value(new_inputs, old_inputs, property_path(path))
    a, b = _flatten(old_inputs), _flatten(new_inputs)
    return {path for path in a.keys() | b.keys() if a.get(path) != b.get(path)}


def property_path(path: str) -> tuple[str, ...]:
    """A Pulumi property path (`a.b["c.d"]`, `a[0]`) as its keys (pulumi/pulumi
    sdk/go/common/resource/properties_path.go `ParsePropertyPath`)."""
    keys: list[str] = []
    for match in re.finditer(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|([^.\[\]]+)', path):
        quoted, index, plain = match.groups()
        keys.append(quoted if quoted is not None else index if index is not None else plain)
    return tuple(keys)


def _with_old_value(new: Any, old: Any, keys: tuple[str, ...]) -> Any:
    """`new` with the value `old` has at `keys` (removed where `old` has none)."""
    if not keys:
        return old
    if not isinstance(new, dict):
        return new
    key, rest = keys[0], keys[1:]
    copy = dict(new)
    old_child = old.get(key) if isinstance(old, dict) else None
    if not rest:
        if isinstance(old, dict) and key in old:
            copy[key] = old[key]
        else:
            copy.pop(key, None)
        return copy
    if key in copy or old_child is not None:
        copy[key] = _with_old_value(copy.get(key, {}), old_child, rest)
    return copy


def _matches(path: str, names: Iterable[str]) -> bool:
    return any(path == n or path.startswith(f"{n}.") for n in names)


def _top(path: str) -> str:
    return path.split(".", 1)[0]


def _force_new(resource: Resource) -> frozenset[str]:
    rules = set(FORCE_NEW.get(resource.type, frozenset()))
    if resource.type.startswith("kubernetes:") and not resource.type.startswith("kubernetes:index"):
        rules |= KUBERNETES_FORCE_NEW
    rules |= set(resource.replace_on_changes)
    return frozenset(rules)


def _is_no_op_update(resource: Resource) -> bool:
    """An update that runs nothing on a host: `update` is `true`, or the Command has neither
    `update` nor `create` (pulumi-command remote/commandController.go `Update` runs `update`,
    else `create`, else nothing)."""
    inputs = resource.inputs
    if "update" not in inputs and "create" not in inputs:
        return True
    return unwrap(inputs.get("update")) == NO_OP_UPDATE


# ---------------------------------------------------------------- the plan


def plan(before: Graph, after: Graph, *, replace: Collection[str] = ()) -> Plan:
    """What `pulumi up` with the `after` program does to a stack deployed with `before`.

    A resource continues the old one its URN or, failing that, its first alias names
    (tools.harness.identity). It is replaced when a changed input is one its provider forces a
    new resource for, when a resource in its `replace_with` is replaced, when its
    `replacement_trigger` changes (pulumi/pulumi step_generator.go `shouldTriggerReplace`: a
    trigger that was or becomes null replaces nothing), or when `pulumi up --replace` names it
    (`replace`: URNs or names; step_generator.go `isTargetedReplace`). A refresh that dropped
    resources (a terminated machine) is `tools.recovery.refreshed`."""
    stack = _stack_of(after) or _stack_of(before)
    taken = identity.match(after, [r.urn for r in before], stack).taken_over
    replaced: set[str] = set()
    changes: list[Change] = []
    for urn in after.topological():
        new = after.by_urn[urn]
        old = before.by_urn.get(taken.get(urn, ""))
        if old is None:
            changes.append(Change(urn, new.name, new.type, Action.CREATE))
            replaced.add(urn)  # everything reading its outputs sees new values
            continue
        ignored = {".".join(property_path(path)) for path in new.ignore_changes}
        paths = {p for p in _changed_paths(old, new) if not _matches(p, ignored)}
        # Inputs fed by a replaced resource change with it (a new id, an auto-name).
        for key, deps in new.property_dependencies.items():
            if deps & replaced and not _matches(key, ignored):
                paths.add(key)
        forcing = sorted(
            p for p in paths if _matches(p, _force_new(new)) or _top(p) in _force_new(new)
        )
        if any(dependency in replaced for dependency in new.replace_with):
            forcing.append("replaceWith")
        # A resource deleted with a replaced one is replaced with it (step_generator.go `diff`:
        # "marked for replacement because ... (its DeletedWith resource) is being replaced").
        if new.deleted_with is not None and new.deleted_with in replaced:
            forcing.append("deletedWith")
        if urn in replace or new.name in replace:
            forcing.append("--replace")
        replaced_ids = {after.by_urn[u].id for u in replaced if after.by_urn[u].id}
        if _trigger_changed(old.replacement_trigger, new.replacement_trigger, replaced_ids):
            forcing.append("replacementTrigger")
        if not paths and not forcing:
            changes.append(Change(urn, new.name, new.type, Action.UNCHANGED))
            continue
        changed = tuple(sorted(paths))
        if forcing:
            if new.protect or old.protect:
                changes.append(
                    Change(urn, new.name, new.type, Action.BLOCKED, changed, ", ".join(forcing))
                )
                continue
            replaced.add(urn)
            changes.append(
                Change(urn, new.name, new.type, Action.REPLACE, changed, ", ".join(forcing))
            )
        elif new.type == COMMAND and not _is_no_op_update(new):
            changes.append(Change(urn, new.name, new.type, Action.RERUN, changed))
        else:
            changes.append(Change(urn, new.name, new.type, Action.UPDATE, changed))
    continued = set(taken.values())
    for urn, old in before.by_urn.items():
        if urn not in continued:
            changes.append(Change(urn, old.name, old.type, Action.DELETE))
    return Plan(
        changes,
        _node_impacts(before, after, changes, taken),
        _refused(before, after, changes, taken),
    )


def _stack_of(graph: Graph) -> str:
    return graph.resources[0].urn.split("::", 1)[0].removeprefix("urn:pulumi:") if graph else ""


def _trigger_changed(old: Any, new: Any, replaced_ids: set[str]) -> bool:
    """The engine's `shouldTriggerReplace`: nulls mean "no trigger"; a trigger holding the id of
    a replaced resource (a new machine's instance id, which the mocks cannot tell from the old)
    is a changed one."""
    if old is None or new is None:
        return False
    values = new if isinstance(new, list) else [new]
    return old != new or any(isinstance(v, str) and v in replaced_ids for v in values)


def _refused(
    before: Graph, after: Graph, changes: list[Change], taken: Mapping[str, str]
) -> list[str]:
    """Updates that fail at `up`: a smaller root volume (EBS ModifyVolume only grows a volume;
    terraform-provider-aws updates root_block_device.volume_size in place with it), a new
    Ubuntu release on a kept machine, and subnets AWS refuses (`_subnets_refused`)."""
    found = _subnets_refused(before, after, changes, taken)
    for change in changes:
        if change.action is not Action.UPDATE or _ROOT_VOLUME_SIZE not in change.changed:
            continue
        old, new = (
            graph.by_urn[urn].plain_inputs()["rootBlockDevice"]["volumeSize"]
            for graph, urn in ((before, taken.get(change.urn, change.urn)), (after, change.urn))
        )
        if new < old:
            found.append(
                f"{change.name}: its root volume cannot shrink from {old} to {new} GiB (EBS "
                "volumes only grow); keep rootVolumeGiB, or replace the machine"
            )
    for change in changes:
        if change.action is not Action.RERUN or change.type != COMMAND:
            continue
        old_release, new_release = (
            _ubuntu_release(script_params(graph.by_urn[urn]).get(_CONTAINERD, ""))
            for graph, urn in ((before, taken.get(change.urn, change.urn)), (after, change.urn))
        )
        if old_release and new_release and old_release != new_release:
            found.append(
                f"{change.name}: its machine keeps Ubuntu {old_release} (an AMI is not "
                f"followed after launch), and the step would install the containerd of "
                f"{new_release}, which apt there cannot; keep osVersion for running machines, "
                "or move them by adding a pool with the new release and removing the old one"
            )
    return found


SUBNET = "aws:ec2/subnet:Subnet"
# What sits in a subnet by its `subnetId`: a machine, an EFA interface.
_IN_SUBNET = ("aws:ec2/instance:Instance", "aws:ec2/networkInterface:NetworkInterface")


def _subnets_refused(
    before: Graph, after: Graph, changes: list[Change], taken: Mapping[str, str]
) -> list[str]:
    """A subnet deleted while a kept machine or interface still sits in it (they ignore a new
    `subnetId`: EC2 DeleteSubnet answers DependencyViolation), and a new subnet whose block a
    kept one holds (a subnet keeps the block it was created with: InvalidSubnet.Conflict)."""
    gone = {taken.get(c.urn, c.urn) for c in changes if c.action in (Action.REPLACE, Action.DELETE)}
    kept = [r for r in before if r.urn not in gone]
    found = []
    for change in changes:
        if change.type != SUBNET:
            continue
        if change.action is Action.DELETE:
            subnet = before.by_urn[change.urn]
            inside = sorted(
                r.name
                for r in kept
                if r.type in _IN_SUBNET and unwrap(r.inputs.get("subnetId")) == subnet.id
            )
            if subnet.id and inside:
                found.append(
                    f"{change.name}: AWS refuses to delete a subnet machines still sit in "
                    f"({', '.join(inside)}: a machine keeps its subnet); replace them in the "
                    "same up (pulumi up --replace <URN of each>), or keep the zone"
                )
        elif change.action in (Action.CREATE, Action.REPLACE):
            block = unwrap(after.by_urn[change.urn].inputs.get("cidrBlock"))
            holders = sorted(
                r.name
                for r in kept
                if r.type == SUBNET and unwrap(r.inputs.get("cidrBlock")) == block
            )
            if holders:
                found.append(
                    f"{change.name}: its block {block} is held by {', '.join(holders)} (a "
                    "subnet keeps the block of its zone's first position), so AWS refuses it; "
                    "add new zones at the end of availabilityZones"
                )
    return found


def _ubuntu_release(pin: str) -> str | None:
    """The Ubuntu release of a containerd pin: Docker's containerd.io like
    2.2.1-1~ubuntu.24.04~noble (components/hosts/pins.py, decision 042), or Ubuntu's own like
    2.2.1-0ubuntu1~24.04.*, which a stack deployed before 042 still holds."""
    match = re.search(r"~(?:ubuntu\.)?([0-9]{2}\.[0-9]{2})[.~]", pin)
    return match.group(1) if match else None


def node_names(graph: Graph) -> list[str]:
    pools = unwrap(graph.outputs.get("nodePools")) or {}
    return [name for pool in pools.values() for name in pool]


# An Instance's root volume size (aws.ec2.Instance root_block_device.volume_size).
_ROOT_VOLUME_SIZE = "rootBlockDevice.volumeSize"
# The runtime step's package pin, whose version names its Ubuntu release (components/hosts/pins.py).
_CONTAINERD = "CONTAINERD_VERSION"
# The login user of a Command's connection (pulumi-command ConnectionArgs `user`).
_NEW_USER = "connection.user"

# A node's GPU Jobs (__main__.py: `<node>-validation`, `<node>-nccl`), which request all of its
# GPUs: replaced outside a roll, each waits for every GPU of a node in service.
GPU_JOBS = ("validation-job", "nccl-job")


# What an old step's stored delete hook runs, when it drains a node.
DRAIN_PROGRAM = "drain-node.sh"
# The resource hooks that take a Node out of the cluster through the API when their resource is
# deleted (components/kube/node_hooks.py).
LEAVES_HOOK = "gpu-cluster-node-leaves"
PROVIDER = "pulumi:providers:kubernetes"


def _node_impacts(
    before: Graph, after: Graph, changes: list[Change], taken: Mapping[str, str]
) -> dict[str, NodeImpact]:
    """Per GPU node: drained (a stored drain hook runs: its step is deleted or replaced, and not
    with the control plane it would drain on), reset and re-joined (its machine or join
    replaced; an existing host's join replaced), the disruptive steps that re-run, and its GPU
    Jobs run again in service."""
    by_name = {c.name: c for c in changes}
    gone = (Action.REPLACE, Action.DELETE)
    old_urn = {c.urn: taken.get(c.urn, c.urn) for c in changes}
    ended = {old_urn[c.urn] for c in changes if c.action in gone}
    names = list(dict.fromkeys([*node_names(before), *node_names(after)]))
    unreachable = skips_api_drains(after)
    impacts: dict[str, NodeImpact] = {}
    for node in names:
        impact = NodeImpact(node)
        if node in node_names(before):
            impact.drained = any(
                _drains(old, unreachable)
                and (old.deleted_with is None or old.deleted_with not in ended)
                for old in before
                if old.urn in ended and old.name.startswith(f"{node}-")
            )
            instance = by_name.get(node)
            join = by_name.get(steps.JOIN.resource_name(node))
            if instance is not None:
                impact.reset = any(c is not None and c.action in gone for c in (instance, join))
            else:
                # An existing host (no instance of the node's name): nothing resets it, and
                # only a replaced join (a new host key: a new machine) joins it again.
                impact.reset = join is not None and join.action is Action.REPLACE
            impact.rejoined = node in node_names(after) and impact.reset
            for step in (*steps.disruptive_steps(), steps.EFA):
                change = by_name.get(step.resource_name(node))
                if change is not None and change.action in (Action.RERUN, Action.REPLACE):
                    impact.disrupted.append(step.suffix)
            rolled = _rolls(before, after, node, taken)
            if not (impact.reset or rolled):  # else the roll or a new machine re-validates
                impact.revalidated = [
                    job
                    for job in GPU_JOBS
                    if (change := by_name.get(f"{node}-{job}")) is not None
                    and change.action is Action.REPLACE
                ]
        impacts[node] = impact
    return impacts


def _drains(resource: Resource, unreachable: bool = False) -> bool:
    """Its delete drains a Node: a stored `delete` that runs drain-node.sh (its `deletedWith`
    is checked by the caller: the engine skips the provider's Delete for it), or a before-delete
    hook that takes the Node out through the API, which the engine runs whatever the options
    (pulumi step.go `DeleteStep.Apply` runs hooks before checking `RetainOnDelete` and
    `deletedWith`) and which drains nothing while controlPlane.unreachable is on."""
    delete = unwrap(resource.inputs.get("delete"))
    if isinstance(delete, str) and DRAIN_PROGRAM in delete:
        return True
    return LEAVES_HOOK in resource.hooks.get("before_delete", []) and not unreachable


def skips_api_drains(graph: Graph) -> bool:
    """controlPlane.unreachable in the program: its Kubernetes provider deletes unreachable
    objects from the state (`deleteUnreachable`), and its leave hooks drain nothing."""
    return any(
        unwrap(r.inputs.get("deleteUnreachable")) in (True, "true") for r in graph.of_type(PROVIDER)
    )


def roll_change(graph: Graph, node: str) -> str | None:
    """The node's CHANGE (what its disruptive steps install) as the graph holds it: its put in
    service's, or for earlier releases its `-drain` step's (`-roll-drain` before that)."""
    for resource in graph:
        if resource.name == steps.IN_SERVICE.resource_name(node):
            return (unwrap(resource.inputs.get("environment")) or {}).get("CHANGE")
        if resource.name in (f"{node}-drain", f"{node}-roll-drain") and script_params(resource):
            return script_params(resource).get("CHANGE")
    return None


def _rolls(before: Graph, after: Graph, node: str, taken: Mapping[str, str]) -> bool:
    """The node's roll runs: its CHANGE (what the disruptive steps install) is new."""
    old, new = roll_change(before, node), roll_change(after, node)
    return old is not None and new is not None and old != new


# ---------------------------------------------------------------- printing


def render(plan_: Plan, *, show_unchanged: bool = False) -> str:
    lines = ["Resources:"]
    for change in sorted(plan_.changes, key=lambda c: (c.action.value, c.name)):
        if change.action is Action.UNCHANGED and not show_unchanged:
            continue
        detail = ""
        if change.reason:
            detail = f"  (forced by {change.reason})"
        elif change.changed:
            detail = (
                f"  ({', '.join(change.changed[:4])}{', ...' if len(change.changed) > 4 else ''})"
            )
        lines.append(f"    {change.action.value:<9} {change.name}  [{change.type}]{detail}")
    counts = plan_.counts()
    lines.append(
        "    " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())) if counts else "    none"
    )
    lines.append("Nodes:")
    for impact in plan_.nodes.values():
        lines.append(f"    {impact.node}: {impact.summary()}")
    lines.extend(_note(f"Fails: {refusal}") for refusal in plan_.refused)
    new_user = [
        c.name for c in plan_.changes if c.action is Action.RERUN and _NEW_USER in c.changed
    ]
    if new_user:
        warning = (
            f"Warning: {len(new_user)} step(s) dial machines they ran on before as another SSH "
            "user (ssh.user, or controlPlane.user). A machine the stack launched has the users "
            "it booted with (the AMI's default one): unless the new user exists there with the "
            "key, every dial fails and the stack cannot update. Create the user on the hosts "
            "first, or keep the user."
        )
        lines.append(_note(warning))
    login_only = [c for c in plan_.changes if c.action is Action.RERUN and _login_key_only(c)]
    if login_only:
        lines.append(_note(login_key_warning(login_only)))
    in_service = [impact.node for impact in plan_.nodes.values() if impact.revalidated]
    if in_service:
        warning = (
            f"Warning: {len(in_service)} node(s) in service re-run their GPU Jobs at once, "
            "outside a roll. Each Job requests every GPU of its node: on a busy node it waits "
            "until its deadline and fails the update, or takes the GPUs as they free up. Apply "
            "the change when those nodes are idle."
        )
        lines.append(_note(warning))
    return "\n".join(lines) + "\n"


# The login key of a Command's connection (and of its bastion hop).
_LOGIN_KEY = ("connection.privateKey", "connection.proxy.privateKey")


def _login_key_only(change: Change) -> bool:
    return bool(change.changed) and all(path in _LOGIN_KEY for path in change.changed)


def login_key_warning(changes: list[Change]) -> str:
    """The warning for steps that re-run only because `sshPrivateKey` changed: pulumi-command
    compares the connection like any input, and its `Update` runs `update` (here: the step's
    script again), commandController.go. No delete depends on the stored key (decision 058)."""
    install_runs = [
        c for c in changes if any(c.name.endswith(f"-{s.suffix}") for s in steps.INSTALL_STEPS)
    ]
    return (
        f"Warning: {len(changes)} step(s) re-run only because the login key changed "
        f"(sshPrivateKey), {len(install_runs)} of them install steps: each runs its script "
        "again on its host, which finds everything in place and installs and restarts nothing, "
        "but dials every host and takes that long (pulumi-command compares the connection like "
        "any input). Rotate the key when a long `up` is acceptable (docs/ssh-keys.md)."
    )


def _note(text: str) -> str:
    """A warning or failure under the plan, wrapped at 100 columns, its further lines indented."""
    return textwrap.fill(text, width=100, subsequent_indent="    ")


# ---------------------------------------------------------------- the program of another version


@contextlib.contextmanager
def program_of(ref: str, root: Path = ROOT) -> Iterator[Path]:
    """The program as committed at git `ref` (`git archive`), in a temporary directory, with its
    `components` importable instead of the working tree's for as long as the context lasts."""
    with tempfile.TemporaryDirectory(prefix="gpu-cluster-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", ref],
            check=False,
            capture_output=True,
        )
        if archive.returncode != 0:
            raise ValueError(f"git archive {ref}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        saved = {k: v for k, v in sys.modules.items() if _is_program_module(k)}
        for name in saved:
            del sys.modules[name]
        sys.path.insert(0, tmp)
        try:
            yield Path(tmp)
        finally:
            sys.path.remove(tmp)
            for name in [k for k in sys.modules if _is_program_module(k)]:
                del sys.modules[name]
            sys.modules.update(saved)


def _is_program_module(name: str) -> bool:
    return name == "components" or name.startswith("components.")


def stack_config_at(checkout: Path, stack_file_name: str) -> dict[str, Any]:
    data = yaml.safe_load((checkout / stack_file_name).read_text(encoding="utf-8")) or {}
    return dict(data.get("config") or {})
