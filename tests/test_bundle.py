"""Scripts travel once per host (components/hosts/bundle.py, lib/run-by-digest.sh; docs/decisions/
026-scripts-travel-once-per-host.md): each role's directory holds exactly its programs, named by
their sha256; every host copies its role's directory once and each step carries only its
parameters and digests, so a comment edit changes no step and a real change only the steps of
that script. On the host, a program runs only from the root-owned directory and only when it
matches its digest: one that does not is refused before it runs, and a missing one is named
(run in the sandbox, from the steps the program registers).
"""

from __future__ import annotations

import hashlib
import re
from functools import cache

import pytest

from components.hosts import bundle
from components.hosts.rendering import COMMON_LIB, stripped_script
from components.hosts.steps import ALL_STEPS, Where, host_scripts
from tests.helpers import graphs as shared
from tests.sandbox import LOGIN_HOME, Sandbox, needs_sandbox, step_stdin
from tools.harness.graph import Graph, Resource, script_params, unwrap
from tools.harness.identity import VARIANTS
from tools.harness.stacks import STACKS, edited_script, run_program

COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"
ROLES = (Where.NODE, Where.CONTROL_PLANE, Where.IMAGE_BUILDER)
DIGEST = re.compile(r"^by_digest ([0-9a-f]{64})$", re.M)


@cache
def graph(stack: str) -> Graph:
    """A stack file's graph, or a pinned variant's (`dev-baked` has an image builder)."""
    if stack in VARIANTS:
        base, config = VARIANTS[stack]
        return run_program(base, config=config)
    return shared.stack_graph(stack)


GRAPHS = (*STACKS, *VARIANTS)


def runs(command: Resource) -> list[str]:
    """The digests a step checks: its own program's."""
    return DIGEST.findall(unwrap(command.inputs["stdin"]))


def _running(g: Graph) -> list[Resource]:
    """The Commands that run a script (`<node>-in-service` runs none: its hooks act)."""
    return [c for c in g.of_type(COMMAND) if "create" in c.inputs]


def _host(resource: Resource) -> dict:
    """Where a resource dials (its connection without the dial limit, which differs between
    steps with and without a delete hook)."""

    def without_limit(connection: dict) -> dict:
        return {
            key: without_limit(value) if isinstance(value, dict) else value
            for key, value in connection.items()
            if key != "dialErrorLimit"
        }

    return without_limit(resource.plain_inputs()["connection"])


# ---------------------------------------------------------------- the bundle


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
def test_a_roles_directory_holds_exactly_its_programs_named_by_their_sha256(
    tmp_path, monkeypatch, role
):
    monkeypatch.setattr(bundle, "BUILD_DIR", tmp_path)
    stale = tmp_path / role.value / f"{'0' * 64}.sh"
    stale.parent.mkdir()
    stale.write_text("a program of an older bundle\n")
    directory = bundle.write(bundle.Bundle(role.value, host_scripts(role)))
    files = {path.name: path.read_bytes() for path in directory.iterdir()}
    assert set(files) == {f"{bundle.digest(s)}.sh" for s in host_scripts(role)}, sorted(files)
    for name, data in files.items():
        assert name == f"{hashlib.sha256(data).hexdigest()}.sh", f"{name}: not its own digest"
    for script in host_scripts(role):
        program = bundle.program(script)
        # Self-contained: the shared library, then the script, both without comments.
        assert program.startswith("#!/usr/bin/env bash\n"), script
        assert program.endswith(stripped_script(COMMON_LIB) + stripped_script(script)), script
    # Written again unchanged, the directory is the same (its hash is the copy's input).
    before = {path.name: path.stat().st_mtime_ns for path in directory.iterdir()}
    bundle.write(bundle.Bundle(role.value, host_scripts(role)))
    assert {path.name: path.stat().st_mtime_ns for path in directory.iterdir()} == before


def test_the_libraries_are_no_programs_of_their_own():
    for library in (COMMON_LIB, bundle.RUNNER):
        with pytest.raises(ValueError, match="library"):
            bundle.program(library)


def test_each_role_bundles_the_scripts_its_steps_run():
    for role in (Where.NODE, Where.CONTROL_PLANE):
        rows = [step for step in ALL_STEPS if step.runs_on is role]
        assert set(host_scripts(role)) == {step.script for step in rows if step.script}, role


@pytest.mark.parametrize("stack", GRAPHS)
def test_every_host_copies_its_roles_directory_once_and_each_step_runs_from_it(stack):
    """A host's steps wait for its one copy; every digest a step checks is a program of the
    directory that copy sends; and every program of a role runs on some stack."""
    g = graph(stack)
    copies = {r.urn: r for r in g.of_type(COPY)}
    assert copies, f"{stack}: no host gets its scripts"
    for copy in copies.values():
        inputs = copy.plain_inputs()
        assert inputs["remotePath"] == bundle.REMOTE_DIR, f"{copy.urn}: {inputs['remotePath']}"
        assert not inputs.get("delete"), f"{copy.urn}: a copy dials nothing on delete"
    for command in _running(g):
        (copy_urn,) = [urn for urn in command.dependencies if urn in copies]
        copy = copies[copy_urn]
        role = copy.plain_inputs()["source"]["path"].rsplit("/", 1)[1]
        assert copy.plain_inputs()["source"]["path"] == f"build/host-scripts/{role}", copy.urn
        assert _host(command) == _host(copy), f"{command.urn}: not the host {copy.urn} sends to"
        assert f"\nSTEP_BUNDLE={bundle.REMOTE_DIR}/{role}\n" in unwrap(command.inputs["stdin"])
        bundled = {bundle.digest(script) for script in host_scripts(Where(role))}
        digests = runs(command)
        assert digests and set(digests) <= bundled, f"{command.urn}: {digests} not in {role}"
        assert unwrap(command.inputs["stdin"]).endswith(
            f"source {bundle.INSTALLED_DIR}/{digests[0]}.sh\n"
        ), command.urn


def test_every_bundled_program_is_run_by_some_step():
    ran: dict[str, set[str]] = {}
    for stack in GRAPHS:
        for command in _running(graph(stack)):
            role = re.search(r"\nSTEP_BUNDLE=\S+/([a-z-]+)\n", unwrap(command.inputs["stdin"]))
            ran.setdefault(role.group(1), set()).update(runs(command))
    for role in ROLES:
        unused = [
            s for s in host_scripts(role) if bundle.digest(s) not in ran.get(role.value, set())
        ]
        assert not unused, f"{role.value}: bundled, run by no step of {GRAPHS}: {unused}"


def test_a_step_carries_its_parameters_and_digests_not_its_script():
    g = graph("dev")
    for command in _running(g):
        stdin = unwrap(command.inputs["stdin"])
        assert "log()" not in stdin and "init_script" not in stdin, f"{command.urn}: a script"
        assert len(stdin) < 4096, f"{command.urn}: {len(stdin)} bytes of stdin"
        assert script_params(command) or command.name.endswith("-power-off"), command.urn


def _stdins(g: Graph) -> dict[str, tuple[str, str | None]]:
    return {c.urn: (unwrap(c.inputs["stdin"]), unwrap(c.inputs.get("delete"))) for c in _running(g)}


@pytest.mark.parametrize("script", [COMMON_LIB, "install-driver.sh", "read-kubeconfig.sh"])
def test_a_comment_edit_changes_no_steps_stdin(script):
    def add_comment(text: str) -> str:
        lines = text.splitlines(keepends=True)
        return "".join([lines[0], "# a note for the next reader\n\n", *lines[1:], "\n# end\n"])

    before = run_program("dev")
    with edited_script(script, add_comment):
        after = run_program("dev")
        written = {p.name for p in (bundle.BUILD_DIR / "node").iterdir()}
    assert _stdins(after) == _stdins(before)
    assert written == {f"{bundle.digest(s)}.sh" for s in host_scripts(Where.NODE)}


@pytest.mark.parametrize(
    ("script", "steps"),
    [
        ("install-driver.sh", ("-driver",)),
        # A control-plane step's.
        ("install-cni.sh", ("-cni",)),
        # Every step runs it: every step's stdin changes.
        (COMMON_LIB, None),
    ],
)
def test_a_real_change_changes_only_the_steps_of_that_script(script, steps):
    def edit(text: str) -> str:
        return text + '\nreadonly GPU_CLUSTER_EDITION="2"\n'

    before = _stdins(run_program("dev"))
    with edited_script(script, edit):
        after = _stdins(run_program("dev"))
    changed = {urn for urn in after if after[urn] != before[urn]}
    expected = {
        urn for urn in after if steps is None or urn.rsplit("::", 1)[1].endswith(tuple(steps))
    }
    assert changed == expected, sorted(changed ^ expected)


# ---------------------------------------------------------------- run by digest, on a host


@pytest.fixture
def node_host(tmp_path) -> Sandbox:
    """A fresh Ubuntu host whose login user got the node's scripts (`<host>-scripts`)."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    sb.add_login_user()
    sb.put_bundle(Where.NODE.value)
    return sb


WAIT_READY = {"RETRY_BASE_SECONDS": "0.01"}


@needs_sandbox
def test_a_step_installs_its_program_root_only_and_runs_it(node_host):
    result = node_host.run_step(step_stdin("wait-ready.sh", WAIT_READY))
    assert result.returncode == 0, result.stderr
    assert "host ready" in result.stderr, result.stderr
    installed = node_host.installed_program(bundle.digest("wait-ready.sh"))
    assert installed.read_text() == bundle.program("wait-ready.sh")
    assert oct(installed.stat().st_mode & 0o777) == "0o600", "readable by others"
    assert sorted(p.name for p in installed.parent.iterdir()) == [installed.name]


@needs_sandbox
def test_a_program_that_does_not_match_its_digest_is_refused_before_it_runs(node_host):
    """The login user's copy was changed (anyone who logs in as that user can write it): the
    step refuses it before any of it runs, and installs nothing."""
    digest = bundle.digest("wait-ready.sh")
    copy = node_host.host_path(f"{LOGIN_HOME}/{bundle.REMOTE_DIR}/node/{digest}.sh")
    copy.write_text(copy.read_text() + "touch /etc/gpu-cluster-tampered\n")
    result = node_host.run_step(step_stdin("wait-ready.sh", WAIT_READY))
    assert result.returncode == 2, result.stderr
    assert "[by-digest] FAILED:" in result.stderr, result.stderr
    assert "does not match its digest: changed on this host since it arrived" in result.stderr
    assert "pulumi up --replace the URN of <host>-scripts" in result.stderr, result.stderr
    # Only the copy into the root-owned directory ran (to check it), and it is gone again.
    assert [call[0] for call in result.calls] == ["install"], result.commands()
    assert not node_host.exists(f"{bundle.INSTALLED_DIR}/{digest}.sh")
    assert not list(node_host.host_path(bundle.INSTALLED_DIR).iterdir()), "a staged copy left"
    assert not node_host.exists("/etc/gpu-cluster-tampered")


@needs_sandbox
def test_an_installed_program_changed_since_is_put_back_before_it_runs(node_host):
    """A changed program in the root-owned directory never runs: the checked copy of the
    host's scripts takes its place first."""
    assert node_host.run_step(step_stdin("wait-ready.sh", WAIT_READY)).returncode == 0
    installed = node_host.installed_program(bundle.digest("wait-ready.sh"))
    installed.write_text(installed.read_text().replace("host ready", "host pwned"))
    result = node_host.run_step(step_stdin("wait-ready.sh", WAIT_READY))
    assert result.returncode == 0, result.stderr
    assert "host pwned" not in result.stderr and "host ready" in result.stderr
    assert installed.read_text() == bundle.program("wait-ready.sh")


@needs_sandbox
def test_a_missing_program_is_named_with_where_it_was_looked_for(tmp_path):
    sb = Sandbox(tmp_path)
    sb.add_login_user()  # its scripts never arrived
    digest = bundle.digest("wait-ready.sh")
    result = sb.run_step(step_stdin("wait-ready.sh", WAIT_READY))
    assert result.returncode == 2, result.stderr
    assert (
        f"[by-digest] FAILED: program {digest} is in neither {bundle.INSTALLED_DIR} nor "
        f"{LOGIN_HOME}/{bundle.REMOTE_DIR}/node/{digest}.sh: the host's copy of its scripts "
        "(<host>-scripts) did not reach it" in result.stderr
    ), result.stderr
    assert result.calls == [], result.commands()


@needs_sandbox
def test_run_as_root_without_sudo_a_program_is_looked_for_in_roots_home(tmp_path):
    """An operator who runs a stored hook as root (no sudo, so no invoking user): root's own
    home is where the copy would be."""
    sb = Sandbox(tmp_path)
    digest = bundle.digest("wait-ready.sh")
    result = sb.run_text(step_stdin("wait-ready.sh", WAIT_READY))
    assert result.returncode == 2, result.stderr
    assert f"nor /root/{bundle.REMOTE_DIR}/node/{digest}.sh" in result.stderr, result.stderr


@needs_sandbox
def test_a_program_of_another_role_is_not_found_in_this_roles_copy(node_host):
    """A control-plane program asked of a node's copy: named missing, not run."""
    program = "read-kubeconfig.sh"
    result = node_host.run_step(step_stdin(program, {"API_SERVER": "https://x:6443"}, role="node"))
    assert result.returncode == 2, result.stderr
    assert f"program {bundle.digest(program)} is in neither" in result.stderr


# A slow `install` (ahead of coreutils' on the sandbox's PATH): it opens its destination at once,
# as install does, and writes and closes it later, so two steps that install one program at
# once overlap the way dozens of steps on one control plane can.
SLOW_INSTALL = """#!/usr/bin/env bash
src="${@: -2:1}" dst="${@: -1}"
mkdir -p "$(dirname "$dst")"
exec 3>"$dst"
sleep 0.3
cat "$src" >&3
sleep 0.3
exec 3>&-
chmod 0600 "$dst"
"""


@needs_sandbox
def test_steps_that_install_one_program_at_once_both_run_it(node_host):
    """Two steps on one host (a control plane's steps while an operator runs one by hand)
    install the same program: neither sees the other's half-written copy, so neither refuses
    a program that matches its digest."""
    node_host.write("/usr/local/bin/install", SLOW_INSTALL, 0o755)
    digest = bundle.digest("wait-ready.sh")
    check = "".join(
        [
            f"STEP_BUNDLE={bundle.REMOTE_DIR}/node\n",
            stripped_script(bundle.RUNNER),
            f"by_digest {digest}\n",
            "echo installed and checked\n",
        ]
    )
    (node_host.tmp_dir / "check.sh").write_text(check)
    result = node_host.run_step(
        'bash "$TMPDIR/check.sh" > "$TMPDIR/a.out" 2>&1 & first=$!\n'
        "sleep 0.5\n"
        'bash "$TMPDIR/check.sh" > "$TMPDIR/b.out" 2>&1 & second=$!\n'
        'wait $first; echo "first: $?"\n'
        'wait $second; echo "second: $?"\n'
        'cat "$TMPDIR/a.out" "$TMPDIR/b.out"\n'
    )
    assert "first: 0\n" in result.stdout and "second: 0\n" in result.stdout, result.stdout
    assert result.stdout.count("installed and checked") == 2, result.stdout
    installed = node_host.installed_program(digest)
    assert installed.read_text() == bundle.program("wait-ready.sh")
    assert [p.name for p in installed.parent.iterdir()] == [installed.name], "temporary left"
