"""The binaries of the real-engine test layer: each a main package of a pinned Go module, built
with the flags its own release build uses. Why these versions and flags:
docs/decisions/055-the-real-engine-built-from-its-modules.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"


@dataclass(frozen=True)
class Binary:
    """One binary: `package` of `module` (the directory under tools/engine/modules holding its
    go.mod), at `version` (the version go.mod requires; a test keeps the two equal)."""

    name: str
    module: str
    package: str
    requires: str  # the module path whose required version is this binary's version
    version: str
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    generate: str | None = None  # a generator of tools/engine/generate.py, run before the build
    generated_version: str | None = None  # the version the generator writes into the files
    download_package: str | None = None  # what `go list` fetches the modules of, if not package

    @property
    def module_dir(self) -> Path:
        return MODULES / self.module


_PULUMI_VERSION = "v3.274.0"
_KUBERNETES_PROVIDER = "v4.0.0-20260115033456-f47bc2d6f199"  # the commit tagged v4.25.0
_KUBERNETES = "v1.35.4"


def _kube_version_ldflags(version: str) -> tuple[str, ...]:
    """What kubernetes/hack/lib/version.sh (kube::version::ldflags) stamps into its binaries:
    without it kube-apiserver reports v0.0.0-master and /version says so to every client."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return tuple(flags)


BINARIES: tuple[Binary, ...] = (
    # pulumi/pulumi .goreleaser.yml (build `pulumi`): -trimpath, -w -s, the version stamp, tags.
    Binary(
        name="pulumi",
        module="pulumi",
        package="github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
        requires="github.com/pulumi/pulumi/pkg/v3",
        version=_PULUMI_VERSION,
        ldflags=(
            f"-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={_PULUMI_VERSION}",
        ),
        tags=("osusergo", "grpcnotrace"),
    ),
    # pulumi-kubernetes Makefile (target `provider`): the version stamp of pkg/version.
    Binary(
        name="pulumi-resource-kubernetes",
        module="kubernetes",
        # Upstream's main package, copied with the files its build generates (generate.py).
        package="gpu-cluster/tools/engine/kubernetes/generated/pulumi-resource-kubernetes",
        requires="github.com/pulumi/pulumi-kubernetes/provider/v4",
        version=_KUBERNETES_PROVIDER,
        ldflags=("-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=4.25.0",),
        generate="kubernetes-main",
        generated_version="4.25.0",
        download_package="github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes",
    ),
    Binary(
        name="kube-apiserver",
        module="apiserver",
        package="k8s.io/kubernetes/cmd/kube-apiserver",
        requires="k8s.io/kubernetes",
        version=_KUBERNETES,
        ldflags=_kube_version_ldflags(_KUBERNETES),
    ),
    Binary(
        name="kube-controller-manager",
        module="apiserver",
        package="k8s.io/kubernetes/cmd/kube-controller-manager",
        requires="k8s.io/kubernetes",
        version=_KUBERNETES,
        ldflags=_kube_version_ldflags(_KUBERNETES),
    ),
    Binary(
        name="kube-scheduler",
        module="apiserver",
        package="k8s.io/kubernetes/cmd/kube-scheduler",
        requires="k8s.io/kubernetes",
        version=_KUBERNETES,
        ldflags=_kube_version_ldflags(_KUBERNETES),
    ),
    # The hosts of the end-to-end tests run the real kubectl against the real API server
    # (docs/decisions/067-end-to-end-on-hosts-in-network-namespaces.md); a module of its own:
    # kustomize and the other CLI libraries are no part of kube-apiserver's build list.
    Binary(
        name="kubectl",
        module="kubectl",
        package="k8s.io/kubernetes/cmd/kubectl",
        requires="k8s.io/kubernetes",
        version=_KUBERNETES,
        ldflags=_kube_version_ldflags(_KUBERNETES),
    ),
    Binary(
        name="etcd",
        module="etcd",
        package="go.etcd.io/etcd/server/v3",
        requires="go.etcd.io/etcd/server/v3",
        version="v3.6.5",
    ),
    # Our own stand-in for pulumi-command (tools/engine/modules/command/README.md says why).
    Binary(
        name="pulumi-resource-command",
        module="command",
        package="gpu-cluster/tools/engine/command/cmd/pulumi-resource-command",
        requires="github.com/pulumi/pulumi-go-provider",
        version="v1.3.0",
    ),
)


def by_name(name: str) -> Binary:
    for binary in BINARIES:
        if binary.name == name:
            return binary
    raise KeyError(f"no engine binary named {name!r}: {[b.name for b in BINARIES]}")
