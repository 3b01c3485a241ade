"""The offline preview (`python -m tools.preview <stack>`) for every stack file: the printed plan,
and artefacts that exist and parse (YAML loads, scripts pass shellcheck, the picture is a real
SVG and PNG where Graphviz is installed). Bad config fails cleanly, with exit code 1; a missing
Graphviz skips only the picture, with a one-line notice; an artefact directory the tool did not
create is refused, never deleted.

The scripts and manifests each stack renders are pinned by digest (`tests/preview_digests/`), so a
restructuring of the code shows it changes nothing a host or the cluster receives. A deliberate
change to a script or manifest regenerates them:
UPDATE_PREVIEW_DIGESTS=1 python -m pytest tests/test_preview.py
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from components.hosts import bundle, steps
from components.hosts.rendering import available_scripts
from tests.helpers.tools import require_tool
from tools import graph_picture, preview
from tools.harness import mocks, stacks
from tools.harness.graph import FIRST_CONTACT_CHAIN, HOST_CHAIN, VALIDATION_CHAIN, unwrap
from tools.harness.stacks import ROOT, STACKS, TEST_SECRETS

STACK_FILES = sorted(p.name.split(".")[1] for p in ROOT.glob("Pulumi.*.yaml"))
# The node's machine, its first contact (the host-key rotation, then the copy of its scripts,
# which every step waits for), the step table's chain, and its put in service, last: after the
# node passed its checks.
CONTRACT_CHAIN = [
    "instance",
    *FIRST_CONTACT_CHAIN,
    *HOST_CHAIN,
    *VALIDATION_CHAIN,
    steps.IN_SERVICE.suffix,
]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DIGEST_DIR = ROOT / "tests" / "preview_digests"
DIGESTED = ("scripts", "manifests")
UPDATE_DIGESTS = os.environ.get("UPDATE_PREVIEW_DIGESTS") == "1"


@pytest.fixture(scope="module")
def previews(tmp_path_factory) -> dict[str, preview.Preview]:
    out_root = tmp_path_factory.mktemp("preview")
    return {stack: preview.preview(stack, out_root=out_root) for stack in STACK_FILES}


def rendered_digests(out_dir: Path) -> dict[str, str]:
    """`scripts/<resource>.sh` / `manifests/<resource>.yaml` -> sha256 of what the preview wrote."""
    return {
        path.relative_to(out_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in DIGESTED
        for path in sorted((out_dir / folder).rglob("*"))
        if path.is_file()
    }


def parse_digests(text: str) -> dict[str, str]:
    """`sha256sum` format: `<hex>  <path>` per line."""
    return {path: digest for digest, path in (line.split("  ", 1) for line in text.splitlines())}


@pytest.mark.parametrize("stack", STACK_FILES)
def test_rendered_scripts_and_manifests_match_their_digests(previews, stack):
    rendered = rendered_digests(previews[stack].out_dir)
    pinned_file = DIGEST_DIR / f"{stack}.sha256"
    if UPDATE_DIGESTS:
        DIGEST_DIR.mkdir(exist_ok=True)
        pinned_file.write_text("".join(f"{d}  {p}\n" for p, d in sorted(rendered.items())))
    assert pinned_file.exists(), (
        f"no digests for {stack}: UPDATE_PREVIEW_DIGESTS=1 python -m pytest tests/test_preview.py"
    )
    pinned = parse_digests(pinned_file.read_text())
    changed = sorted(p for p in rendered.keys() & pinned.keys() if rendered[p] != pinned[p])
    added, removed = (
        sorted(rendered.keys() - pinned.keys()),
        sorted(pinned.keys() - rendered.keys()),
    )
    assert not (changed or added or removed), (
        f"Pulumi.{stack}.yaml renders other scripts/manifests than pinned in {pinned_file.name}: "
        f"changed {changed}, new {added}, gone {removed}. A deliberate change: "
        "UPDATE_PREVIEW_DIGESTS=1 python -m pytest tests/test_preview.py"
    )


def test_every_stack_file_is_previewed():
    assert set(STACKS) <= set(STACK_FILES), f"stack files found: {STACK_FILES}"


@pytest.mark.parametrize("stack", STACK_FILES)
def test_tree_lists_every_resource_with_its_dependencies(previews, stack):
    result = previews[stack]
    lines = result.text.splitlines()
    for resource in result.graph:
        entry = f"+ {resource.type}  {resource.name}  create"
        matches = [i for i, line in enumerate(lines) if line.strip() == entry]
        assert matches, f"{resource.urn}: no tree line {entry!r} in the {stack} preview"
        deps = result.graph.direct_dependencies(resource)
        if deps:
            following = lines[matches[0] + 1].strip()
            assert following.startswith("depends on: "), (
                f"{resource.urn}: waits for {sorted(deps)} but the preview shows no 'depends on'"
            )
            for dep in deps:
                assert result.graph.by_urn[dep].name in following, (
                    f"{resource.urn}: dependency {dep} missing from {following!r}"
                )


@pytest.mark.parametrize("stack", STACK_FILES)
def test_chains_follow_the_contract_for_every_node(previews, stack):
    result = previews[stack]
    expected_nodes = preview.node_names(result.graph)
    assert expected_nodes, f"{stack}: the nodePools output names no node"
    chain_lines = result.text.split("\nChains:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for node_name in expected_nodes:
        # Nodes with two or more GPUs run the NCCL check after the CUDA validation; the roll
        # ends (uncordon) after both.
        names = {r.name for r in result.graph}
        nccl = ["nccl-job"] if f"{node_name}-nccl-job" in names else []
        chain = [*CONTRACT_CHAIN[:-1], *nccl, CONTRACT_CHAIN[-1]]
        line = f"    {node_name}: {' -> '.join(chain)}"
        assert line in chain_lines, (
            f"{stack}: chain of node {node_name} is not the contract's; got "
            f"{[c for c in chain_lines if c.strip().startswith(node_name + ':')]}"
        )
        chain = result.chains[node_name]
        for later, earlier in ((b, a) for a, b in itertools.pairwise(chain)):
            assert result.graph.depends_on(later, earlier), (
                f"{later.urn}: printed after {earlier.urn} in the chain but does not wait for it"
            )


@pytest.mark.parametrize("stack", STACK_FILES)
def test_policies_run_and_pass(previews, stack):
    report = previews[stack].policies
    assert report.available, f"{stack}: policy pack not run: {report.note}"
    assert report.passed, f"{stack}: no mandatory policy was evaluated"
    assert not report.violations, f"{stack}: policy violations: {report.violations}"
    summary = f"Policies: {len(report.passed)} passed, 0 violations"
    assert summary in previews[stack].text, f"{stack}: no {summary!r} line in the preview"


# One-line, shell-quoted parameter assignments at the top of a rendered script.
_ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=('[^'\n]*'|[^\s'\"]*)$", re.M)


def _distinct_scripts(files: list[Path]) -> list[Path]:
    """One file per script that differs in more than its quoted parameter values (the nodes of a
    pool run the same steps): shellcheck's verdict does not depend on a safely quoted value."""
    seen: dict[str, Path] = {}
    for path in files:
        shape = _ASSIGNMENT.sub(r"\1='value'", path.read_text())
        seen.setdefault(shape, path)
    return list(seen.values())


def _as_the_host_runs_it(stdin: str) -> str:
    """A step's stdin with the program it runs by digest in place of the line that sources
    it (the bundled program: lib/common.sh and the script, components/hosts/bundle.py)."""
    programs = {bundle.digest(script): bundle.program(script) for script in available_scripts()}
    sourced = re.compile(rf"(?m)^source {re.escape(bundle.INSTALLED_DIR)}/([0-9a-f]{{64}})\.sh$")
    assert sourced.search(stdin), "a step that sources no program by digest"
    return sourced.sub(lambda match: programs[match.group(1)], stdin)


@pytest.mark.parametrize("stack", STACK_FILES)
def test_every_host_step_has_its_scripts_and_they_pass_shellcheck(previews, stack, tmp_path):
    result = previews[stack]
    scripts = result.out_dir / "scripts"
    # `<node>-in-service` runs no command (its hooks act through the API): no script.
    commands = [c for c in result.graph.of_type(preview.COMMAND_TYPE) if "stdin" in c.inputs]
    assert commands, f"{stack}: no host steps recorded"
    for command in commands:
        inputs = unwrap(command.inputs)
        script = scripts / f"{command.name}.sh"
        assert script.is_file(), f"{command.urn}: {script} was not written"
        # What the host runs, a secret the program derives (the join token) as a placeholder.
        stdin = inputs["stdin"]
        for name in preview.MASKED_PARAMETERS:
            stdin = re.sub(rf"(?m)^{name}=.*$", f"{name}='<secret:{name}>'", stdin)
        assert script.read_text() == stdin.rstrip("\n") + "\n", (
            f"{command.urn}: {script} differs from the stdin the host will run"
        )
        delete = scripts / f"{command.name}.delete.sh"
        assert delete.is_file() == bool(inputs.get("delete")), (
            f"{command.urn}: delete script written={delete.is_file()}, "
            f"has delete={bool(inputs.get('delete'))}"
        )
    # What the host runs: the step's stdin with the program it sources (by digest) in place.
    expanded = tmp_path / stack
    expanded.mkdir()
    for path in _distinct_scripts(sorted(scripts.glob("*.sh"))):
        (expanded / path.name).write_text(_as_the_host_runs_it(path.read_text()))
    files = sorted(expanded.iterdir())
    # SC1091: a program carries lib/common.sh inline; its `source` line is not followed.
    check = subprocess.run(
        ["shellcheck", "-s", "bash", "-e", "SC1091", "--severity=style", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, f"{stack}: shellcheck findings:\n{check.stdout}{check.stderr}"


@pytest.mark.parametrize("stack", STACK_FILES)
def test_secrets_are_placeholders_in_scripts(previews, stack):
    result = previews[stack]
    for node_name in preview.node_names(result.graph):
        join = (result.out_dir / "scripts" / f"{node_name}-join.sh").read_text()
        assert "<secret:JOIN_TOKEN>" in join, f"{node_name}-join: no join token placeholder"
    for path in result.out_dir.rglob("*"):
        if path.suffix in (".sh", ".yaml", ".txt", ".dot", ".svg"):
            text = path.read_text()
            assert TEST_SECRETS["sshPrivateKey"] not in text, f"{path}: holds a key"
            assert "PRIVATE KEY-----\nb3Bl" not in text, f"{path}: holds a private key body"


@pytest.mark.parametrize("stack", STACK_FILES)
def test_manifests_are_yaml_kubernetes_objects(previews, stack):
    result = previews[stack]
    objects = [r for r in result.graph if r.type.startswith("kubernetes:")]
    assert objects, f"{stack}: no Kubernetes objects recorded"
    for resource in objects:
        path = result.out_dir / "manifests" / f"{resource.name}.yaml"
        assert path.is_file(), f"{resource.urn}: {path} was not written"
        manifest = yaml.safe_load(path.read_text())
        api_version, kind = resource.type.split(":", 1)[1].rsplit(":", 1)
        assert manifest["kind"] == kind, f"{resource.urn}: kind {manifest.get('kind')!r}"
        assert manifest["apiVersion"].endswith(api_version.rsplit("/", 1)[-1]), (
            f"{resource.urn}: apiVersion {manifest.get('apiVersion')!r}"
        )
        assert "metadata" in manifest, f"{resource.urn}: manifest without metadata"
        # A (Cluster)RoleBinding's body is roleRef/subjects, a (Cluster)Role's its rules; a
        # Namespace or ServiceAccount may be metadata alone.
        body = {"spec", "data", "stringData", "roleRef", "rules"}
        assert body & manifest.keys() or kind in ("Namespace", "ServiceAccount"), (
            f"{resource.urn}: manifest without spec or data: {sorted(manifest)}"
        )


def test_a_manifest_does_not_depend_on_the_order_its_maps_arrive_in(previews, tmp_path):
    # The inputs arrive as protobuf Structs, whose maps have no order of their own.
    objects = [r for r in previews["prod"].graph if r.type.startswith("kubernetes:")]
    reversed_objects = [dataclasses.replace(r, inputs=_reversed_maps(r.inputs)) for r in objects]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    written = preview.write_manifests(objects, tmp_path / "a")
    again = preview.write_manifests(reversed_objects, tmp_path / "b")
    assert len(written) == len(objects) > 10
    assert [p.name for p in written] == [p.name for p in again]
    assert [p.read_bytes() for p in written] == [p.read_bytes() for p in again]


def _reversed_maps(value):
    if isinstance(value, dict):
        return {k: _reversed_maps(value[k]) for k in reversed(value)}
    if isinstance(value, list):
        return [_reversed_maps(v) for v in value]
    return value


@pytest.mark.parametrize("stack", STACK_FILES)
def test_graph_dot_has_a_cluster_and_the_edges_of_every_chain(previews, stack):
    dot = (previews[stack].out_dir / "graph.dot").read_text()
    for node_name, chain in previews[stack].chains.items():
        assert f'label="{node_name}"' in dot, f"{stack}: no cluster for node {node_name}"
        for earlier, later in itertools.pairwise(chain):
            assert f'"{earlier.urn}" -> "{later.urn}"' in dot, (
                f"{later.urn}: edge from {earlier.urn} missing in graph.dot"
            )


@pytest.mark.parametrize("stack", STACK_FILES)
def test_graph_picture_is_a_valid_svg_and_png(previews, stack):
    require_tool("dot", graph_picture.INSTALL_HINT)
    out = previews[stack].out_dir
    root = ET.parse(out / "graph.svg").getroot()
    assert root.tag.rsplit("}", 1)[-1] == "svg", f"{stack}: graph.svg root is {root.tag}"
    png = (out / "graph.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE) and len(png) > len(PNG_SIGNATURE), (
        f"{stack}: graph.png is not a PNG ({len(png)} bytes)"
    )
    texts = [t.text or "" for t in root.iter() if t.tag.rsplit("}", 1)[-1] == "text"]
    assert texts and not any("\\n" in t for t in texts), (
        f"{stack}: graph.svg shows a literal \\n in a label: {[t for t in texts if chr(92) in t]}"
    )


def test_preview_leaves_the_harness_stdout_registry_as_it_was(monkeypatch):
    registered = {
        **mocks.COMMAND_STDOUT,
        "-kubeconfig": lambda _args: "not a kubeconfig: parsing it for a CA hash would fail",
        "-other": lambda _args: "x",
    }
    monkeypatch.setattr(mocks, "COMMAND_STDOUT", dict(registered))
    graph = preview.record("dev")
    join = graph.named(f"{preview.node_names(graph)[0]}-join").plain_inputs()["stdin"]
    # The placeholder kubeconfig's CA hash: the preview's placeholders took precedence.
    assert f"CA_CERT_HASH=sha256:{'0' * 64}\n" in join, join
    assert registered == mocks.COMMAND_STDOUT, (
        f"preview changed COMMAND_STDOUT: {sorted(mocks.COMMAND_STDOUT)}"
    )


def test_encrypted_stack_values_are_never_read(monkeypatch, tmp_path):
    stack_config = dict(stacks.stack_file("dev"))
    stack_config["gpu-cluster:sshPrivateKey"] = {"secure": "v1:AAAAciphertextAAAA"}
    monkeypatch.setattr(stacks, "stack_file", lambda _stack: stack_config)
    result = preview.preview("dev", out_root=tmp_path)
    for path in result.out_dir.rglob("*"):
        if path.is_file() and path.suffix != ".png":
            assert "ciphertext" not in path.read_text(), f"{path}: holds the encrypted value"


def test_bad_config_fails_like_pulumi_up(capsys, tmp_path):
    code = preview.main(
        [
            "dev",
            "--out",
            str(tmp_path),
            "--set",
            'nodePools=[{"name": "a10g", "instanceType": "g5.huge", "count": 1}]',
        ]
    )
    captured = capsys.readouterr()
    assert code == 1, f"exit code {code} for a bad nodePools[0].instanceType"
    assert "gpu-cluster:nodePools[0].instanceType: got 'g5.huge'" in captured.err, captured.err
    assert captured.err.startswith("error: the stack configuration has 1 problem"), captured.err
    assert "Traceback" not in captured.err + captured.out, "a traceback for a user's mistake"
    assert not (tmp_path / "dev").exists(), "artefacts written for an invalid stack"


def test_bad_config_from_the_command_line_has_no_traceback(tmp_path):
    run = subprocess.run(
        [
            "python",
            "-m",
            "tools.preview",
            "dev",
            "--out",
            str(tmp_path),
            "--set",
            "kubernetesVersion=1.20",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, f"exit code {run.returncode}: {run.stderr}"
    assert "gpu-cluster:kubernetesVersion: got '1.20'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr, run.stderr


def test_missing_graphviz_skips_only_the_picture_with_one_notice(monkeypatch, capsys, tmp_path):
    real_which = shutil.which
    monkeypatch.setattr(
        graph_picture.shutil, "which", lambda cmd: None if cmd == "dot" else real_which(cmd)
    )
    code = preview.main(["dev", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, f"exit code {code} without Graphviz: {captured.err}"
    assert "Chains:" in captured.out and "Policies: " in captured.out, captured.out
    notices = [line for line in captured.out.splitlines() if "graph picture skipped" in line]
    assert len(notices) == 1 and graph_picture.INSTALL_HINT in notices[0], captured.out
    out = tmp_path / "dev"
    assert (out / "graph.dot").is_file(), "the DOT file is written anyway"
    assert not (out / "graph.svg").exists() and not (out / "graph.png").exists()


def _fake_dot(tmp_path, body: str) -> str:
    """An executable standing in for Graphviz's `dot`, running `body` (bash)."""
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text(f"#!/usr/bin/env bash\n{body}\n")
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            'echo "Error: trouble in line 7" >&2; exit 3',
            "`dot -Tsvg` failed (exit 3: Error: trouble",
        ),
        ('echo partial > "$3"; exec sleep 10', "took longer than 1 s"),
    ],
    ids=["fails", "too-slow"],
)
def test_a_dot_that_cannot_draw_skips_only_the_picture(monkeypatch, capsys, tmp_path, body, says):
    """A fleet's graph can take `dot` minutes, and a broken Graphviz fails: either way the plan
    is printed, with one notice, and no half-drawn picture is left."""
    fake = _fake_dot(tmp_path, body)
    real_which = shutil.which
    monkeypatch.setattr(
        graph_picture.shutil, "which", lambda cmd: fake if cmd == "dot" else real_which(cmd)
    )
    monkeypatch.setattr(graph_picture, "DOT_TIMEOUT_SECONDS", 1)
    code = preview.main(["dev", "--out", str(tmp_path / "build")])
    captured = capsys.readouterr()
    assert code == 0, f"exit code {code}: {captured.err}"
    assert "Chains:" in captured.out and "Traceback" not in captured.err, captured.err
    notices = [line for line in captured.out.splitlines() if "graph picture skipped" in line]
    assert len(notices) == 1 and says in notices[0], captured.out
    out = tmp_path / "build" / "dev"
    assert (out / "graph.dot").is_file(), "the DOT file is written anyway"
    assert not (out / "graph.svg").exists() and not (out / "graph.png").exists()


@pytest.mark.parametrize("key", ["sshPrivateKey", "gpu-cluster:sshPrivateKey"])
def test_set_refuses_a_secret_instead_of_dropping_it(capsys, tmp_path, key):
    """The preview stands in a placeholder for every secret: a value given with --set would be
    dropped in silence, so it is refused, saying how a secret is set."""
    code = preview.main(["dev", "--out", str(tmp_path), "--set", f"{key}=not-a-secret"])
    err = capsys.readouterr().err
    assert code == 1, f"exit code {code} for --set {key}"
    assert "pulumi config set --secret gpu-cluster:sshPrivateKey" in err, err
    assert "not-a-secret" not in err, "the value is echoed"
    assert not (tmp_path / "dev").exists(), "a preview was written"


def test_out_refuses_a_directory_it_did_not_create(capsys, tmp_path):
    mine = tmp_path / "dev"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code = preview.main(["dev", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1, f"exit code {code} for an existing directory the tool did not create"
    assert str(mine) in err and "not deleting" in err, err
    assert (mine / "notes.txt").read_text() == "keep me", "the tool touched a foreign directory"


def test_out_refuses_a_symlink_and_replaces_only_its_own_directory(capsys, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / preview.OUT_MARKER).write_text("a marker does not make a link ours")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "dev").symlink_to(target)
    assert preview.main(["dev", "--out", str(tmp_path / "out")]) == 1
    assert (target / preview.OUT_MARKER).is_file(), "followed a symlink and deleted its target"
    capsys.readouterr()

    first = preview.preview("dev", out_root=tmp_path / "own")
    stale = first.out_dir / "scripts" / "stale.sh"
    stale.write_text("left over from an older run")
    second = preview.preview("dev", out_root=tmp_path / "own")
    assert not stale.exists(), "a second run did not replace the directory it created"
    assert (second.out_dir / preview.OUT_MARKER).is_file()


def test_unknown_stack_is_a_clean_error(capsys, tmp_path):
    code = preview.main(["nosuchstack", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "Pulumi.nosuchstack.yaml" in err, f"exit {code}: {err}"


def test_artefact_root_is_the_build_directory():
    assert Path(preview.OUT_ROOT) == ROOT / "build" / "preview", f"OUT_ROOT {preview.OUT_ROOT}"
