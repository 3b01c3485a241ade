"""Run a Pulumi Python program on the real engine: the CLI and providers of build/engine/, a
local `file://` backend, passphrase secrets, all in one temporary directory.

    stack = EngineStack.create(work_dir, program_dir, "test", binaries=build/engine)
    stack.set_config({"gpu-cluster:clusterName": "t"}, secrets={"gpu-cluster:sshPrivateKey": k})
    stack.up(), stack.up(expect_no_changes=True), stack.refresh(), stack.destroy()
    stack.state()                            # `pulumi stack export`: the checkpoint, as a dict

The CLI runs as a subprocess in the project directory (the program's Pulumi.yaml and the
stack's config file); the program is served by tools/harness/language_host.py (`--client`);
events come from `--event-log`. Why: docs/decisions/055-the-real-engine-built-from-its-modules.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PASSPHRASE = "real-engine-tests"  # encrypts only throwaway test stacks
# What the CLI exits with when `--expect-no-changes` finds a change, or an operation fails.
FAILED = 255


@dataclass(frozen=True)
class Operation:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def output(self) -> str:
        return f"$ {' '.join(self.command)}\n{self.stdout}\n{self.stderr}"

    def resource_events(self, kind: str) -> list[dict[str, Any]]:
        """The `kind` events (resourcePreEvent, resOutputsEvent, resOpFailedEvent, ...)."""
        return [e[kind] for e in self.events if kind in e]

    def steps(self) -> list[tuple[str, str]]:
        """(op, urn) of every step the engine finished, in order (resOutputsEvent)."""
        return [
            (e["metadata"]["op"], e["metadata"]["urn"])
            for e in self.resource_events("resOutputsEvent")
        ]

    def diagnostics(self, severity: str | None = None) -> list[str]:
        return [
            e["message"]
            for e in self.resource_events("diagnosticEvent")
            if severity is None or e.get("severity") == severity
        ]


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux: /proc/<pid>/task/<tid>/children)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in children.read_text().split():
                    found.append(int(child))
                    pending.append(int(child))
    return found


@dataclass
class EngineStack:
    """One stack of one project on a file:// backend under `work_dir`."""

    work_dir: Path
    program_dir: Path
    name: str
    binaries: Path
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=dict)
    # (command, wall seconds) of every operation run, in order: what a suite costs.
    log: list[tuple[str, float]] = field(default_factory=list)

    @property
    def project_dir(self) -> Path:
        return self.work_dir / "project"

    @property
    def config_file(self) -> Path:
        return self.project_dir / f"Pulumi.{self.name}.yaml"

    @classmethod
    def create(
        cls, work_dir: Path, program_dir: Path, name: str, binaries: Path, **kwargs: Any
    ) -> EngineStack:
        stack = cls(work_dir, Path(program_dir).resolve(), name, Path(binaries).resolve(), **kwargs)
        for directory in ("project", "backend", "home"):
            (work_dir / directory).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(stack.program_dir / "Pulumi.yaml", stack.project_dir / "Pulumi.yaml")
        stack.cli("stack", "init", name, "--secrets-provider", "passphrase", check=True)
        return stack

    def env(self) -> dict[str, str]:
        """The CLI's environment: our binaries first on PATH, nothing read from or written to
        the user's ~/.pulumi, no plugin downloads, no update check."""
        env = {
            **os.environ,
            "PATH": f"{self.binaries}{os.pathsep}{os.environ.get('PATH', '')}",
            "PULUMI_HOME": str(self.work_dir / "home"),
            "PULUMI_BACKEND_URL": f"file://{self.work_dir / 'backend'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            # Enables --event-log, as the Automation API does (automation/_stack.py).
            "PULUMI_DEBUG_COMMANDS": "true",
            **self.extra_env,
        }
        env.pop("PULUMI_ACCESS_TOKEN", None)
        return env

    def cli(
        self, *args: str, check: bool = False, input: str | None = None, timeout: float = 900
    ) -> subprocess.CompletedProcess:
        """`pulumi ARGS` in the project directory. `timeout` only bounds a hung engine."""
        result = subprocess.run(
            [str(self.binaries / "pulumi"), *args],
            cwd=self.project_dir,
            env=self.env(),
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"pulumi {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def set_config(
        self, values: Mapping[str, Any], secrets: Mapping[str, str] | None = None
    ) -> None:
        """Write plain values (objects included) into the stack's config file, then each
        secret with `pulumi config set --secret` (read from stdin, encrypted with the
        passphrase), as a user's stack file holds them."""
        document = yaml.safe_load(self.config_file.read_text()) or {}
        document.setdefault("config", {}).update(values)
        self.config_file.write_text(yaml.safe_dump(document, sort_keys=False))
        for key, value in (secrets or {}).items():
            self.cli(
                "config", "set", "--secret", "--stack", self.name, key, check=True, input=value
            )

    @contextlib.contextmanager
    def _language_host(self) -> Iterator[str]:
        host = subprocess.Popen(
            [self.python, "-m", "tools.harness.language_host", str(self.program_dir)],
            cwd=self.project_dir,
            env={**self.env(), "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=(self.work_dir / "language-host.log").open("ab"),
            text=True,
        )
        try:
            port = host.stdout.readline().strip()
            if not port.isdigit():
                raise RuntimeError(
                    "the language host did not start: "
                    + (self.work_dir / "language-host.log").read_text()
                )
            yield f"127.0.0.1:{port}"
        finally:
            host.terminate()
            host.wait(timeout=30)

    def _killed_when(
        self, args: list[str], interrupt: Callable[[], bool], timeout: float = 900
    ) -> subprocess.CompletedProcess:
        """`pulumi ARGS` in a process group of its own, killed (SIGKILL, the CLI and its plugins
        at once, as a cancelled CI job's runner kills its container) as soon as `interrupt()` is
        true. The CLI starts each plugin in a process group of its own (pulumi sdk/go/common/
        resource/plugin/plugin.go `execPlugin`: `cmdutil.RegisterProcessGroup`, Setpgid), so
        they are found as its descendants and killed with it, or they would outlive the test."""
        process = subprocess.Popen(
            [str(self.binaries / "pulumi"), *args],
            cwd=self.project_dir,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if interrupt():
                plugins = _descendants(process.pid)
                os.killpg(process.pid, signal.SIGKILL)
                for pid in plugins:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.1)
        stdout, stderr = process.communicate(timeout=60)
        return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)

    def _operation(
        self,
        args: list[str],
        runs_program: bool,
        interrupt: Callable[[], bool] | None = None,
    ) -> Operation:
        log = self.work_dir / "events.jsonl"
        log.unlink(missing_ok=True)
        args = [
            *args,
            "--stack",
            self.name,
            "--non-interactive",
            "--color",
            "never",
            "--event-log",
            str(log),
        ]
        with contextlib.ExitStack() as stack:
            if runs_program:
                address = stack.enter_context(self._language_host())
                args += [f"--client={address}", "--exec-kind", "auto.inline"]
            started = time.monotonic()
            result = self.cli(*args) if interrupt is None else self._killed_when(args, interrupt)
            self.log.append((args[0], time.monotonic() - started))
        events = (
            [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
            if log.exists()
            else []
        )
        return Operation(["pulumi", *args], result.returncode, result.stdout, result.stderr, events)

    def up(
        self,
        *,
        expect_no_changes: bool = False,
        refresh: bool = False,
        policy_packs: tuple[Path, ...] = (),
        extra: tuple[str, ...] = (),
        interrupt: Callable[[], bool] | None = None,
    ) -> Operation:
        """`pulumi up`; with `interrupt`, killed as soon as it returns true."""
        args = ["up", "--yes", "--skip-preview", *extra]
        if expect_no_changes:
            args.append("--expect-no-changes")
        if refresh:
            args.append("--refresh")
        for pack in policy_packs:
            args += ["--policy-pack", str(pack)]
        return self._operation(args, runs_program=True, interrupt=interrupt)

    def preview(
        self,
        *,
        expect_no_changes: bool = False,
        policy_packs: tuple[Path, ...] = (),
        extra: tuple[str, ...] = (),
    ) -> Operation:
        args = ["preview", *extra]
        if expect_no_changes:
            args.append("--expect-no-changes")
        for pack in policy_packs:
            args += ["--policy-pack", str(pack)]
        return self._operation(args, runs_program=True)

    def refresh(self, *, run_program: bool = False, extra: tuple[str, ...] = ()) -> Operation:
        args = ["refresh", "--yes", "--skip-preview", *extra]
        if run_program:
            args.append("--run-program")
        return self._operation(args, runs_program=run_program)

    def destroy(self, *, run_program: bool = False, extra: tuple[str, ...] = ()) -> Operation:
        args = ["destroy", "--yes", "--skip-preview", *extra]
        if run_program:
            args.append("--run-program")
        return self._operation(args, runs_program=run_program)

    def cancel(self) -> subprocess.CompletedProcess:
        """`pulumi cancel --yes`: a file backend's lock of a killed operation removed
        (pkg/backend/diy/backend.go `CancelCurrentUpdate` deletes the stack's lock files)."""
        return self.cli("cancel", "--yes", "--stack", self.name)

    def state(self, show_secrets: bool = False) -> dict[str, Any]:
        """The stack's checkpoint (`pulumi stack export`, apitype.UntypedDeployment)."""
        args = ["stack", "export", "--stack", self.name]
        if show_secrets:
            args.append("--show-secrets")
        return json.loads(self.cli(*args, check=True).stdout)

    def resources(self, show_secrets: bool = False) -> dict[str, dict[str, Any]]:
        """The checkpoint's resources by URN."""
        deployment = self.state(show_secrets)["deployment"]
        return {r["urn"]: r for r in deployment.get("resources") or []}

    def outputs(self) -> dict[str, Any]:
        return json.loads(
            self.cli(
                "stack", "output", "--json", "--show-secrets", "--stack", self.name, check=True
            ).stdout
        )


def policy_pack_shim(directory: Path, pack: Path, python: str = sys.executable) -> Path:
    """An executable that starts the Python policy pack `pack` the way pulumi-language-python's
    RunPlugin does for an analyzer (sdk/python/cmd/pulumi-language-python/main.go: `python -u
    -m pulumi.policy <args> <pack dir>` in the pack's directory). The CLI runs an executable
    given to `--policy-pack` as a binary analyzer plugin (pkg/resource/plugin/
    analyzer_plugin.go, NewPolicyAnalyzer), so no language host binary is needed."""
    shim = directory / "policy-pack"
    pack = pack.resolve()
    shim.write_text(
        "#!/bin/sh\n"
        "# The Python policy pack under test, started as pulumi-language-python would.\n"
        f"cd '{pack}' && exec '{python}' -u -m pulumi.policy \"$@\" '{pack}'\n"
    )
    shim.chmod(0o755)
    return shim
