"""No configuration value runs as code (issue 41, finding 1): hostile strings (shell
metacharacters, newlines, IPv6 zone indexes, unicode, option-looking `-oProxyCommand=...`) go
through every field of the stack configuration. Each is refused by a problem naming its key, or
accepted as a plain shell word, or, for the few fields that take free text, accepted and handed
to every shell only as data: the recorded graph's shell texts are run and no canary appears.

The fields come from the settings model itself (tests/helpers/hostile.py `configuration_fields`),
so a field added later is tried without a change here.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from components.settings.load import ConfigError
from tests.helpers.hostile import (
    ENTRIES,
    KEY,
    VALUE,
    Field,
    canary_path,
    configuration_fields,
    hostile_strings,
    local_commands,
    payloads,
    run_local_command,
    runs_nothing,
    secret_value,
    shell_word,
)
from tests.helpers.tools import require_tool
from tools.harness.stacks import load_stack_settings, run_program, stack_file

FIELDS = configuration_fields()
# Fields that take free text, and why that is safe: each is shown to reach shells only as data
# by test_free_text_reaches_shells_only_as_data.
FREE_TEXT = {
    "tags.<key>": "AWS tags: sent to the AWS API only",
    "tags.<value>": "AWS tags: sent to the AWS API only",
    "ssh.publicKey": "its comment: authorized_keys, through wait-ready.sh's quoted parameter",
}
# Fields whose value a local Command (where `pulumi up` runs) receives in its environment: the
# bastion and the login, which components/hosts/local/rotate-host-key.sh dials with.
LOCAL = {
    "ssh.user",
    "ssh.port",
    "network.bastion.host",
    "network.bastion.user",
    "network.bastion.port",
    "network.bastion.hostKey",
}


def test_every_field_of_the_model_is_tried():
    names = {field.name for field in FIELDS}
    for name in (
        "network.bastion.host",
        "network.bastion.user",
        "controlPlane.host",
        "controlPlane.endpoint",
        "controlPlane.user",
        "ssh.user",
        "nodePools[0].labels.<key>",
        "tags.<value>",
        "hostKeys.<key>",
    ):
        assert name in names, sorted(names)
    assert set(FREE_TEXT) | LOCAL <= names
    assert len(FIELDS) >= 100, len(FIELDS)


def _stored(settings: Any, field: Field, given: str) -> str | None:
    """The value the settings keep for `given` at `field` (stripped, normalized)."""
    value: Any = settings.model_dump(by_alias=True)
    for part in field.path:
        if part == KEY:
            keys = [k for k in value if k.strip() == given.strip() or k == given]
            return keys[0] if keys else None
        if part == VALUE:
            kept = [v for v in value.values() if isinstance(v, str) and v == given.strip()]
            return kept[0] if kept else None
        value = value[part]
    if hasattr(value, "get_secret_value"):
        return secret_value(value)
    return value if isinstance(value, str) else str(value)


def _names_key(problems: list[Any], key: str) -> bool:
    full = f"gpu-cluster:{key}"
    parent = full.rsplit("[", 1)[0] if full.endswith("]") else None
    return any(
        p.key == full or p.key.startswith((f"{full}.", f"{full}[")) or p.key == parent
        for p in problems
    )


def _verdict(field: Field, value: str) -> str:
    """'refused' (naming the key), 'word' (accepted as a plain shell word) or 'text' (accepted
    free text); fails the test for a refusal that does not name the key."""
    config, key = field.config(value, stack_file(field.stack))
    try:
        settings = load_stack_settings(field.stack, config=config)
    except ConfigError as refused:
        assert _names_key(refused.problems, key), (field.name, value, refused.problems)
        assert "Traceback" not in str(refused)
        return "refused"
    stored = _stored(settings, field, value)
    return "word" if stored is None or shell_word(stored) else "text"


@pytest.mark.parametrize("field", FIELDS, ids=[f"{f.stack}:{f.name}" for f in FIELDS])
@hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_hostile_value_is_refused_or_harmless(field, data):
    """Refused naming the key; else a plain word (nothing to quote, no leading '-'); else free
    text in one of the FREE_TEXT fields. A field a local Command receives takes words only."""
    plausible = _plausible(field)
    value = data.draw(
        st.one_of(
            hostile_strings(),
            st.sampled_from(payloads()).map(lambda p: f"{plausible} {p}"),
            st.sampled_from(payloads()).map(lambda p: f"{plausible}{p}"),
        )
    )
    verdict = _verdict(field, value)
    if verdict == "text":
        assert field.name in FREE_TEXT, (field.name, value)
        assert field.name not in LOCAL, (field.name, value)


def _plausible(field: Field) -> str:
    """The stack file's own value of `field` where it is a string, else a plain name."""
    value: Any = {k.removeprefix("gpu-cluster:"): v for k, v in stack_file(field.stack).items()}
    for index, part in enumerate(field.path):
        if part in (KEY, VALUE):
            entry = ENTRIES.get(field.path[:index], ("hostile", "x"))
            return entry[0] if part == KEY else entry[1]
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return "x"
    return value if isinstance(value, str) else "x"


def test_the_fixed_payloads_on_every_field():
    """Every payload as it stands on every field (the corpus the hypothesis draws from), with
    the tally kept: a new field that lets one through fails here first."""
    tally = {"refused": 0, "word": 0, "text": 0}
    for field in FIELDS:
        for value in payloads():
            verdict = _verdict(field, value)
            tally[verdict] += 1
            if verdict == "text":
                assert field.name in FREE_TEXT, (field.name, value)
    assert tally["refused"] > 0.95 * sum(tally.values()), tally


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_free_text_reaches_shells_only_as_data(stack, tmp_path):
    """The FREE_TEXT fields, each holding every payload it accepts, in one program run."""
    accepted_tags = {}
    comment = []
    public_key = stack_file(stack)["gpu-cluster:ssh"]["publicKey"]
    for index, value in enumerate(payloads()):
        tags = {f"k{index}": value, value: "v"}
        try:
            load_stack_settings(stack, config={"tags": tags})
            accepted_tags.update(tags)
        except ConfigError:
            pass
        ssh = {"user": "ubuntu", "publicKey": f"{public_key} {value}"}
        try:
            load_stack_settings(stack, config={"ssh": ssh})
            comment.append(value.strip())
        except ConfigError:
            pass
    assert len(accepted_tags) >= 20 and len(comment) >= 15, (len(accepted_tags), len(comment))
    tags = {**stack_file(stack)["gpu-cluster:tags"], **dict(list(accepted_tags.items())[:36])}
    ssh = {"user": "ubuntu", "publicKey": f"{public_key} {' '.join(comment)}"}
    graph = run_program(stack, config={"tags": tags, "ssh": ssh})
    held = runs_nothing(graph, tmp_path)
    assert held > 0, "the comment reaches wait-ready's parameters: it should have been seen"


# The values a local Command receives (LOCAL), tried where they reach it: prod dials its
# GPU nodes through its bastion.
LOCAL_CASES = [
    (key, name)
    for key in ("network.bastion.host", "network.bastion.user", "ssh.user")
    for name in range(len(payloads()))
]


@pytest.mark.parametrize(("key", "index"), LOCAL_CASES)
def test_the_local_rotation_runs_no_accepted_value(key, index, tmp_path):
    """Where `pulumi up` runs, with the deploy job's credentials: each hostile bastion address
    or login name is refused naming its key, or the local rotation, run as pulumi-command runs
    it with the real ssh (OpenSSH runs a ProxyCommand through `$SHELL -c`, sshconnect.c
    `ssh_proxy_connect`), runs nothing of it."""
    value = payloads()[index]
    field = next(f for f in FIELDS if f.name == key and f.stack == "prod")
    config, path = field.config(value, stack_file("prod"))
    try:
        load_stack_settings("prod", config=config)
    except ConfigError as refused:
        assert _names_key(refused.problems, path), refused.problems
        return
    require_tool("ssh", "apt-get install openssh-client")
    graph = run_program("prod", config=config)
    command = local_commands(graph)[0]
    run_local_command(
        command,
        workdir=tmp_path,
        overrides={"DIAL_SECONDS": "0", "SHELL": "/bin/sh"},
    )
    assert not canary_path(tmp_path).exists(), f"{key}={value!r} ran on the deploy runner"


def test_the_local_run_would_see_a_canary(tmp_path):
    """The check above can fail: a command that runs a payload leaves the canary."""
    graph = run_program("prod")
    command = local_commands(graph)[0]
    probe = type(command)(command.name, f"sh -c {payloads()[0]!r}", "", {})
    run_local_command(probe, workdir=tmp_path)
    assert canary_path(tmp_path).exists()
