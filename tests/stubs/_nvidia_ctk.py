"""What nvidia-ctk 1.20.0 writes, for the nvidia-ctk stub: it stands for nvidia-ctk of
NVIDIA/nvidia-container-toolkit v1.20.0 (the config read from the file source, its default).

runtime configure --runtime=containerd [--set-as-default] --config=F --drop-in-config=D
  (cmd/nvidia-ctk/runtime/configure/configure.go; pkg/config/engine/containerd/containerd.go
  `New`, `getBaseDropInConfigTree`; config.go `AddRuntimeWithOptions`, `GetDefaultRuntimeOptions`;
  pkg/config/engine/engine.go `GetLowLevelRuntimes`; config_drop_in.go `ConfigWithDropIn.Save`,
  `ensureImports`): the drop-in D is F's whole CRI runtime plugin section plus an nvidia runtime
  copied from the first of (F's default runtime unless nvidia*, runc, crun) that F has, with
  BinaryName /usr/bin/nvidia-container-runtime, and default_runtime_name nvidia with
  --set-as-default. Then F gets D's directory in `imports` (when it lacks it) and is written again,
  whole, every run ("TODO: Only do this if we've actually modified the config"): both through
  go-toml v1 (_go_toml.py `v1_dumps`), so F loses its comments and its order.
config --config-file=F --in-place --set key=value...
  (cmd/nvidia-ctk/config/config.go): F, made with the toolkit's defaults when absent
  (tests/upstream/nvidia-ctk-1.20.0/toolkit-config.toml with the two accept-* keys at their
  defaults, api/config/v1 `GetDefault`: envvar-when-unprivileged true, as-volume-mounts false),
  with each key set.
tests/test_upstream_formats.py holds both to what nvidia-ctk 1.20.0 wrote for the same input.
Fault knobs (the stub passes them as flags): --no-runc-options (the runtime copied has no
options table, as F without one gives), --no-runtime-section (set the default, add no runtime).
"""

from __future__ import annotations

import copy
import os
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _go_toml import v1_dumps

TOOLKIT_CONFIG = (
    Path(__file__).resolve().parent.parent / "upstream/nvidia-ctk-1.20.0/toolkit-config.toml"
)
TOOLKIT_DEFAULTS = {
    "accept-nvidia-visible-devices-as-volume-mounts": "false",
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "true",
}
BINARY = "/usr/bin/nvidia-container-runtime"


def log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f'time="{stamp}" level=info msg="{message}"', file=sys.stderr)


def load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def runtime_configure(args: list[str]) -> int:
    opts = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    flags = {a for a in args if "=" not in a}
    config = opts.get("--config", "/etc/containerd/config.toml")
    drop_in = opts.get("--drop-in-config", "/etc/containerd/conf.d/99-nvidia.toml")
    source = load(config)
    version = source.get("version", 1 if source else 3)
    log(f"Using config version {version}")
    plugin = "io.containerd.cri.v1.runtime" if version >= 3 else "io.containerd.grpc.v1.cri"
    log(f'Using CRI runtime plugin name \\"{plugin}\\"')
    section = source.get("plugins", {}).get(plugin)
    dest: dict[str, Any] = {"plugins": {plugin: copy.deepcopy(section)}} if section else {}
    dest["version"] = version
    containerd = dest.setdefault("plugins", {}).setdefault(plugin, {}).setdefault("containerd", {})
    runtimes = (section or {}).get("containerd", {}).get("runtimes", {})
    default = (section or {}).get("containerd", {}).get("default_runtime_name", "")
    names = ([default] if default and not default.startswith("nvidia") else []) + ["runc", "crun"]
    template = next((copy.deepcopy(runtimes[n]) for n in names if n in runtimes), None)
    if template is None:
        template = {
            "privileged_without_host_devices": False,
            "runtime_engine": "",
            "runtime_root": "",
            "runtime_type": "io.containerd.runc.v2",
        }
    if "--no-runc-options" in flags:
        template.pop("options", None)
    if "--no-runtime-section" not in flags:
        nvidia = containerd.setdefault("runtimes", {})["nvidia"] = template
        nvidia["runtime_type"] = nvidia.get("runtime_type") or "io.containerd.runc.v2"
        nvidia.setdefault("options", {})["BinaryName"] = BINARY
    if "--set-as-default" in flags:
        containerd["default_runtime_name"] = "nvidia"
    write(drop_in, v1_dumps(dest))
    top = load(config)
    pattern = os.path.dirname(drop_in) + "/*.toml"
    if pattern not in top.get("imports", []):
        if not top:
            top["version"] = version
        top["imports"] = [*top.get("imports", []), pattern]
    write(config, v1_dumps(top))
    log(f"Wrote updated config to {drop_in}")
    log("It is recommended that containerd daemon be restarted.")
    return 0


def toolkit_config(args: list[str]) -> int:
    path, sets, to_stdout = "/etc/nvidia-container-runtime/config.toml", [], True
    for index, arg in enumerate(args):
        if arg.startswith("--config-file="):
            path = arg.split("=", 1)[1]
        elif arg == "--in-place":
            to_stdout = False
        elif arg == "--set":
            sets.append(args[index + 1])
    if os.path.exists(path):
        lines = Path(path).read_text().splitlines(keepends=True)
    else:
        lines = TOOLKIT_CONFIG.read_text().splitlines(keepends=True)
        sets = [f"{k}={v}" for k, v in TOOLKIT_DEFAULTS.items()] + sets
    for setting in sets:
        key, value = setting.split("=", 1)
        lines = [f"{key} = {value}\n" if line.startswith(f"{key} = ") else line for line in lines]
    if to_stdout:
        sys.stdout.write("".join(lines))
    else:
        write(path, "".join(lines))
    return 0


if __name__ == "__main__":
    command = sys.argv[1:3]
    if command == ["runtime", "configure"]:
        sys.exit(runtime_configure(sys.argv[3:]))
    sys.exit(toolkit_config(sys.argv[2:]))
