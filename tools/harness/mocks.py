"""Plausible provider answers for the SDK's mocks: every output a component reads has a value
(an Output whose value is missing serializes as nothing and drops its dependency edges)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable

import pulumi.runtime
from pulumi.runtime import MockCallArgs, MockResourceArgs


def fake_id(prefix: str, name: str, length: int = 17) -> str:
    return prefix + hashlib.sha256(name.encode()).hexdigest()[:length]


def fake_ip(prefix: str, name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"{prefix}.{digest[0] % 250 + 2}.{digest[1] % 250 + 2}"


def _join_token_stdout(args: MockResourceArgs) -> str:
    """What mint-join-token.sh prints: one JSON line, a bootstrap token unique to the node."""
    digest = hashlib.sha256(args.name.encode()).hexdigest()
    token = f"{digest[:6]}.{digest[6:22]}"
    ca_hash = "sha256:" + hashlib.sha256(b"test cluster CA").hexdigest()
    return json.dumps({"token": token, "caCertHash": ca_hash}) + "\n"


def _kubeconfig_stdout(args: MockResourceArgs) -> str:
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
COMMAND_STDOUT: dict[str, Callable[[MockResourceArgs], str]] = {
    "-join-token": _join_token_stdout,
    "-kubeconfig": _kubeconfig_stdout,
}


# Images this account already holds (id, tags), for the `getAmiIds` look-up of baked images:
# empty by default (a first build); tests and tools add one to stand for a build made earlier.
EXISTING_IMAGES: list[tuple[str, dict[str, str]]] = []


def _image_ids(inputs: dict) -> list[str]:
    """The ids of EXISTING_IMAGES that match every `tag:<key>` filter (all are available)."""
    wanted = {
        f["name"].removeprefix("tag:"): set(f["values"])
        for f in inputs.get("filters", [])
        if f["name"].startswith("tag:")
    }
    return sorted(
        image_id
        for image_id, tags in EXISTING_IMAGES
        if all(tags.get(key) in values for key, values in wanted.items())
    )


# Which Canonical release the AMI look-up answers with: set AMI_RELEASE[0] to a new value to see
# what a newer image does to a running stack (tools.lifecycle).
AMI_RELEASE = [""]


class Mocks(pulumi.runtime.Mocks):
    """Plausible provider answers: every output a component reads has a value, so no
    dependency edge is lost to a missing output."""

    def new_resource(self, args: MockResourceArgs):
        state = dict(args.inputs)
        name, typ = args.name, args.typ
        if typ == "aws:ec2/instance:Instance":
            state.update(
                publicIp=fake_ip("198.51", name),
                privateIp=fake_ip("10.42", name),
                privateDns=f"ip-{fake_ip('10-42', name).replace('.', '-')}.ec2.internal",
                arn=f"arn:aws:ec2:us-west-2:123456789012:instance/{fake_id('i-', name)}",
            )
            return fake_id("i-", name), state
        if typ == "aws:ec2/eip:Eip":
            state.update(publicIp=fake_ip("203.0", name), allocationId=fake_id("eipalloc-", name))
            return fake_id("eipalloc-", name), state
        if typ == "aws:ec2/vpc:Vpc":
            return fake_id("vpc-", name), state
        if typ == "aws:ec2/subnet:Subnet":
            return fake_id("subnet-", name), state
        if typ == "aws:ec2/securityGroup:SecurityGroup":
            return fake_id("sg-", name), state
        if typ == "aws:ec2/keyPair:KeyPair":
            state.update(keyName=state.get("keyName") or name)
            return fake_id("key-", name), state
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
            return fake_id("cmd-", f"{name}|{triggers}", 12), state
        if typ == "kubernetes:batch/v1:Job":
            # pulumi-kubernetes returns a Job only once it has completed (it awaits the
            # Complete condition and fails on Failed), so a created Job reports success.
            state.setdefault(
                "status",
                {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]},
            )
        return fake_id(f"{name}-", name, 8), state

    def call(self, args: MockCallArgs):
        token, inputs = args.token, args.args
        if token == "aws:ec2/getAmi:getAmi":
            name_filter = next(
                (f["values"][0] for f in inputs.get("filters", []) if f["name"] == "name"), "ami"
            )
            return {
                # The newest image of that name; AMI_RELEASE stands for a later Canonical release.
                "id": fake_id("ami-", name_filter + AMI_RELEASE[0]),
                "name": name_filter,
                "architecture": "x86_64",
            }
        if token == "aws:ec2/getAmiIds:getAmiIds":
            return {"ids": _image_ids(inputs)}
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
