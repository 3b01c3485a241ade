"""A filesystem root for `systemd-analyze verify --root`: the systemd units and drop-ins the
scripts wrote (a sandbox's upper directories), the units of the packages they extend or name
(PACKAGE_UNITS), the machine's own systemd units (Debian's systemd: the targets every unit
depends on by default) and a stand-in executable at every path a unit runs.

PACKAGE_UNITS are the directives systemd reads from each package's unit file, as the package
installs it (comments left out); each names its source:
- containerd.io's /lib/systemd/system/containerd.service: containerd v2.2.1 `containerd.service`,
  with ExecStart moved to /usr/bin/containerd by docker/containerd-packaging common/common.mk
  (`sed 's#/usr/local/bin/containerd#/usr/bin/containerd#g'`) and installed by its debian/rules
  `override_dh_auto_install`.
- nvidia-compute-utils-580-server's nvidia-persistenced.service: canonical/nvidia-graphics-drivers
  branch 580-server-noble `debian/nvidia-compute-utils-580-server.nvidia-persistenced.service`
  (installed by debian/rules `dh_installsystemd --name=nvidia-persistenced`; no [Install]: udev's
  SYSTEMD_WANTS in debian/71-nvidia.rules starts it when the nvidia driver binds).
- kubelet's kubelet.service and kubeadm's kubelet.service.d/10-kubeadm.conf: kubernetes/release
  cmd/krel/templates/latest/kubelet/kubelet.service and kubeadm/10-kubeadm.conf, the latter with
  /etc/sysconfig/kubelet turned into /etc/default/kubelet as kubeadm.spec's %install does for
  Debian packages.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

INSTALL = "apt-get install systemd"  # systemd-analyze, systemctl
UNIT_SUFFIXES = (".service", ".timer", ".socket", ".path", ".target", ".mount")

PACKAGE_UNITS = {
    "usr/lib/systemd/system/containerd.service": """\
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
""",
    "usr/lib/systemd/system/nvidia-persistenced.service": """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
StopWhenUnneeded=true
Before=systemd-backlight@backlight:nvidia_0.service

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
""",
    "usr/lib/systemd/system/kubelet.service": """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
""",
    "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": (
        "[Service]\n"
        'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/'
        'bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"\n'
        'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"\n'
        "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env\n"
        "EnvironmentFile=-/etc/default/kubelet\n"
        "ExecStart=\n"
        "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
        "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS\n"
    ),
}

_EXEC = re.compile(r"^Exec[A-Za-z]*=[-@:+!]*(/\S+)", re.M)


def build_root(root: Path, written: list[dict[str, Path]]) -> None:
    """The root: the machine's systemd units, merged /usr (bin, sbin, lib), PACKAGE_UNITS, then
    each sandbox's upper /etc and /usr/local trees of what the scripts wrote (`written`: the
    RunResult.uppers of the runs), and a stand-in for every executable a unit names."""
    for link in ("bin", "sbin", "lib"):
        (root / "usr" / link).mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(f"usr/{link}")
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for path, text in PACKAGE_UNITS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    for uppers in written:
        for tree, below in (("/etc", "systemd"), ("/usr/local", "")):
            source = uppers[tree] / below
            if source.is_dir():
                target = root / tree.lstrip("/") / below
                shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    ours = [root / path for path in PACKAGE_UNITS] + units_in(root / "etc/systemd/system")
    for unit in ours:
        for program in _EXEC.findall(unit.read_text()):
            target = root / program.lstrip("/")
            if not target.exists() and not target.is_symlink():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("#!/bin/sh\nexit 0\n")
                target.chmod(0o755)


def units_in(base: Path) -> list[Path]:
    """Unit files and drop-ins under a directory (links, such as enablement, left out)."""
    found = []
    for current, _dirs, files in os.walk(base):
        for name in files:
            path = Path(current) / name
            if not path.is_symlink() and (path.suffix in UNIT_SUFFIXES or path.suffix == ".conf"):
                found.append(path)
    return found


def written_units(uppers: dict[str, Path]) -> list[str]:
    """The units the scripts wrote or extended (a drop-in `X.service.d/*.conf` names X), as
    relative paths under /etc/systemd/system."""
    base = uppers["/etc"] / "systemd/system"
    names = set()
    if base.is_dir():
        for path in base.rglob("*"):
            if path.is_symlink() or not path.is_file():
                continue
            relative = path.relative_to(base)
            if relative.parent.name.endswith(".d"):
                names.add(relative.parent.name.removesuffix(".d"))
            elif path.suffix in UNIT_SUFFIXES:
                names.add(relative.name)
    return sorted(names)
