"""A step's connection is resolved once per host and handed to `remote.Command` as a mapping
(components/hosts/remote.py, `Host.connection`): the engine must receive exactly what the same
settings as `ConnectionArgs` send (fields, defaults, secrecy, dependencies)."""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pytest
from pulumi.output import UNKNOWN
from pulumi.runtime import rpc

from components.hosts.host_keys import UnpinnedHost, pinned_key
from components.hosts.remote import (
    DIAL_FOREVER,
    Host,
    Login,
    as_mapping,
    ssh_host,
)
from tools.harness.graph import Secret
from tools.harness.stacks import load_stack_settings, run_program, stack_file

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINzylqnLwaBjyHvwd2xYxV4T9XBFQc1m1og9AYYPbi5J"
BASTION_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINd9c8wDaat3wdYpxt6R+HixjgmKSwOeS2Os/j/1DCf9"


def _login(shape: str) -> Login:
    """The login of a stack file, as the program builds it: dev's (no bastion), or prod's
    bastion with its host key pinned."""
    if shape != "bastion":
        return Login.of(load_stack_settings("dev"))
    network = copy.deepcopy(stack_file("prod")["gpu-cluster:network"])
    network["bastion"]["hostKey"] = BASTION_KEY
    return Login.of(load_stack_settings("prod", config={"network": network}))


def _host(machine: aws.ec2.Instance, login: Login, shape: str) -> Host:
    """A machine's Host as the program makes it (`ssh_host`), with the host key in `shape`."""
    host_key: Any = {
        "key-output": machine.arn.apply(lambda _: HOST_KEY),
        "key-output-none": machine.arn.apply(lambda _: None),
        "key-output-empty": machine.arn.apply(lambda _: ""),
    }.get(shape, HOST_KEY)
    address = machine.private_ip
    if shape == "address-unknown":  # as in a preview of a machine not yet created
        address = address.apply(lambda _: UNKNOWN)
    return ssh_host("m", address, login, identity=machine.id, host_key=host_key)


def _as_args(host: Host, dial_limit: int) -> pulumi.Input[command.remote.ConnectionArgs]:
    """What a step sends as pulumi-command's own `ConnectionArgs` of the host's settings, a host
    key known only with the machine put in once known."""
    args = host.args(dial_limit)
    key = vars(args).get("host_key")
    if not isinstance(key, pulumi.Output):
        return args
    fields = {name: value for name, value in vars(args).items() if name != "host_key"}
    return key.apply(lambda known: command.remote.ConnectionArgs(**fields, host_key=known))


SHAPES = ["key-known", "key-output", "bastion", "address-unknown"]


@pytest.mark.parametrize("shape", SHAPES)
# Every step dials without limit now; a bounded limit (the dials of the delete hooks of earlier
# releases) must reach the engine as given too.
@pytest.mark.parametrize("dial_limit", [DIAL_FOREVER, 5])
def test_the_engine_receives_what_connection_args_would_send(shape: str, dial_limit: int):
    login = _login(shape)

    def program() -> None:
        machine = aws.ec2.Instance("m", instance_type="g5.xlarge", ami="ami-0123456789abcdef0")
        host = _host(machine, login, shape)
        for name, connection in (
            ("as-args", _as_args(host, dial_limit)),
            ("as-mapping", host.connection(dial_limit)),
        ):
            command.remote.Command(name, connection=connection, create="true")

    graph = run_program("dev", program=program)
    by_name = {r.name: r for r in graph}
    args, mapping = by_name["as-args"], by_name["as-mapping"]
    assert mapping.inputs == args.inputs
    assert mapping.property_dependencies == args.property_dependencies
    assert mapping.dependencies == args.dependencies
    sent = mapping.inputs["connection"]
    assert isinstance(sent, Secret)
    if shape == "address-unknown":
        assert sent.value == rpc.UNKNOWN  # unknown as a whole, and still a secret
        return
    assert sent.value["host"].startswith("10.42.") and sent.value["dialErrorLimit"] == dial_limit
    assert sent.value["hostKey"] == HOST_KEY
    assert ("proxy" in sent.value) == (shape == "bastion")
    if shape == "bastion":
        assert sent.value["proxy"]["hostKey"] == BASTION_KEY


@pytest.mark.parametrize("shape", ["key-output-none", "key-output-empty"])
def test_a_host_key_that_resolves_to_nothing_stops_the_run_naming_the_host(shape: str):
    """Issue 40, finding 5: a host key that resolves empty or to none was left out of the
    connection, and pulumi-command then accepted any host key (remote/connection.go
    `SSHConfig`: no hostKey, `ssh.InsecureIgnoreHostKey()`). Now no connection is built."""
    login = _login("no-bastion")

    def program() -> None:
        machine = aws.ec2.Instance("m", instance_type="g5.xlarge", ami="ami-0123456789abcdef0")
        command.remote.Command(
            "step", connection=_host(machine, login, shape).connection(), create="true"
        )

    with pytest.raises(UnpinnedHost, match=r"^m: no host key to pin for 10\.42\."):
        run_program("dev", program=program)


def test_no_host_is_made_without_its_host_key():
    login = _login("no-bastion")
    with pytest.raises(ValueError, match="only with its host key pinned"):
        ssh_host("m", "10.0.0.1", login, identity="i-0", host_key=None)  # type: ignore[arg-type]


def test_as_mapping_keeps_every_field_the_args_hold():
    proxy = command.remote.ProxyConnectionArgs(host="198.51.100.7")
    args = command.remote.ConnectionArgs(host="10.0.0.1", proxy=proxy, host_key=HOST_KEY)
    mapping = as_mapping(args)
    assert dict(mapping["proxy"]) == vars(proxy)
    assert {k: v for k, v in mapping.items() if k != "proxy"} == {
        k: v for k, v in vars(args).items() if k != "proxy"
    }
    # The defaults ConnectionArgs fills in are there: the engine has always received them.
    assert mapping["port"] == 22 and mapping["dial_error_limit"] == 10


@pytest.mark.parametrize(
    "stdout", ["", "\n", "[host-key] done", "ssh-ed25519", "ssh-rsa AAAAB3Nza"]
)
def test_a_first_contact_that_printed_no_key_stops_the_run(stdout: str):
    """Issue 40, finding 5: the rotation's answer was read with `_last_key_line`, which made ""
    of an empty stdout, and the connection then went without a host key."""
    with pytest.raises(
        UnpinnedHost, match="dev-gpu-a10g-0: its first contact recorded no host key"
    ):
        pinned_key("dev-gpu-a10g-0", stdout)
    assert pinned_key("m", f"[host-key] done\n{HOST_KEY} \n") == HOST_KEY
