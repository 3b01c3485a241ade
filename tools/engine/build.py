"""Build the engine binaries into build/engine/ with `go build`, reusing Go's caches.

A binary is rebuilt only when what it is built from changed: its stamp records the hashes of its
module's go.mod and go.sum (and of our own sources, for the stand-in), the flags and the Go
version. Go's build cache makes a rebuild after a small change cheap; the stamp makes a build of
nothing changed free (`go build -o` links again every time, which costs a minute for the CLI).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tools.engine.binaries import BINARIES, Binary
from tools.engine.generate import GENERATED, GENERATORS

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = ROOT / "build" / "engine"
BUILD_COMMAND = "python -m tools.engine build"


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Built:
    name: str
    path: Path
    seconds: float  # 0.0 when the stamp said it was built already
    size: int
    cpu_seconds: float = 0.0  # user + system time of the go command and its children


def go_command() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH: the engine is built from Go modules (Go >= 1.26.6)")
    return go


def _go_version(go: str) -> str:
    return subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _sources_digest(binary: Binary) -> str:
    """The module's go.mod and go.sum, and for a module with sources of its own, every file."""
    digest = hashlib.sha256()
    directory = binary.module_dir
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and GENERATED not in p.relative_to(directory).parts
    )
    for path in files:
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


# No optimisation and no inlining in any package: these are test binaries, never shipped, and
# the compiler's optimising passes are about a fifth to a quarter of a cold build's CPU
# (decision 055, "Measurements"). What the binaries do is the same code; only how fast it runs.
GCFLAGS = "-gcflags=all=-N -l"


def build_arguments(binary: Binary, output: Path) -> list[str]:
    arguments = ["build", "-trimpath", GCFLAGS, "-o", str(output)]
    if binary.tags:
        arguments.append("-tags=" + ",".join(binary.tags))
    # -s -w: no symbol table or DWARF, as every release build here does; halves the link.
    arguments.append("-ldflags=" + " ".join(("-s", "-w", *binary.ldflags)))
    arguments.append(binary.package)
    return arguments


def download_arguments(binaries: tuple[Binary, ...]) -> list[str]:
    """`go list` of the binaries' packages (of one module): it fetches exactly the modules their
    builds compile (a bare `go mod download` also fetches every other module go.mod lists, e.g.
    Windows-only ones). A generated main package does not exist before its generator ran, so
    the upstream package it is copied from stands in for it (same imports); `-e` lets its
    missing embedded files pass."""
    packages = [b.download_package or b.package for b in binaries]
    return ["list", "-e", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", *packages]


def start_downloads(binaries: tuple[Binary, ...], go: str) -> list[subprocess.Popen]:
    """Fetch the modules of every binary at once (one `go list` per module), in the background,
    while the first binaries compile: a cold build otherwise alternates network-bound downloads
    (2.8 GiB of modules) with CPU-bound compiles. A download that fails here fails again, with
    Go's message, in its binary's build."""
    modules: dict[str, list[Binary]] = {}
    for binary in binaries:
        modules.setdefault(binary.module, []).append(binary)
    return [
        subprocess.Popen(
            [go, *download_arguments(tuple(group))],
            cwd=group[0].module_dir,
            env=_go_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for group in modules.values()
    ]


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def stamp_of(binary: Binary, go_version: str) -> dict:
    return {
        "version": binary.version,
        "sources": _sources_digest(binary),
        "arguments": build_arguments(binary, Path(binary.name)),
        "go": go_version,
    }


def _stamp_path(out: Path, binary: Binary) -> Path:
    return out / ".stamps" / f"{binary.name}.json"


def is_current(binary: Binary, out: Path = BUILD_DIR, go_version: str | None = None) -> bool:
    """True when `out` holds `binary` built from the sources and flags it has now."""
    stamp = _stamp_path(out, binary)
    if not (out / binary.name).is_file() or not stamp.is_file():
        return False
    go_version = go_version or _go_version(go_command())
    return json.loads(stamp.read_text()) == stamp_of(binary, go_version)


def build(binaries: tuple[Binary, ...] = BINARIES, out: Path = BUILD_DIR, log=print) -> list[Built]:
    """Build each of `binaries` not already current in `out`; raise BuildError on the first
    failure, with Go's output."""
    go = go_command()
    go_version = _go_version(go)
    out.mkdir(parents=True, exist_ok=True)
    downloads = start_downloads(
        tuple(b for b in binaries if not is_current(b, out, go_version)), go
    )
    try:
        return _build_each(binaries, out, go, go_version, log)
    finally:
        for download in downloads:
            if download.poll() is None:
                download.kill()
            download.wait()


def _build_each(binaries, out: Path, go: str, go_version: str, log) -> list[Built]:
    built = []
    for binary in binaries:
        target = out / binary.name
        if is_current(binary, out, go_version):
            log(f"[engine] {binary.name} {binary.version}: built already ({target})")
            built.append(Built(binary.name, target, 0.0, target.stat().st_size))
            continue
        log(f"[engine] building {binary.name} {binary.version} ({binary.package})")
        started = time.monotonic()
        cpu_before = _children_cpu()
        partial = out / f".{binary.name}.partial"
        if binary.generate:
            GENERATORS[binary.generate](go, binary.module_dir, binary.generated_version)
        result = subprocess.run(
            [go, *build_arguments(binary, partial)],
            cwd=binary.module_dir,
            env=_go_env(),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise BuildError(
                f"go build of {binary.name} failed in {binary.module_dir}:\n{result.stderr}"
            )
        partial.replace(target)
        _stamp_path(out, binary).parent.mkdir(exist_ok=True)
        _stamp_path(out, binary).write_text(json.dumps(stamp_of(binary, go_version), indent=1))
        seconds, cpu = time.monotonic() - started, _children_cpu() - cpu_before
        size = target.stat().st_size
        log(f"[engine] {binary.name}: {seconds:.0f} s ({cpu:.0f} s of CPU), {size / 2**20:.0f} MiB")
        built.append(Built(binary.name, target, seconds, size, cpu))
    return built


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def missing(out: Path = BUILD_DIR) -> list[str]:
    """The binaries `out` lacks or holds at another version (no Go needed to ask: a missing Go
    means nothing can be current)."""
    if shutil.which("go") is None:
        return [b.name for b in BINARIES]
    return [b.name for b in BINARIES if not is_current(b, out)]


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: python -m tools.engine build")
