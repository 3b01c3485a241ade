"""The host matrix (`python -m tools.host_matrix`, docs/host-matrix.md) says what the driver and
runtime steps install per instance family and Ubuntu release: each row is checked by running
both scripts, with the parameters the program renders for that row, in the script sandbox
against today's archive (tests/helpers/archive.py), comparing what they installed, from where."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.catalog import CATALOG
from components.hosts import pins
from tests.helpers.archive import DRIVER, KERNEL, Archive, gpu_host, installed, source_of
from tests.sandbox import Sandbox, needs_sandbox
from tools import host_matrix

ROWS = host_matrix.rows()
GSP_OPTIONS = "/etc/modprobe.d/gpu-cluster-nvidia-gsp.conf"


def test_the_docs_show_the_matrix_the_tool_prints():
    assert not host_matrix.stale(), "run: python -m tools.host_matrix --write"
    assert host_matrix.table() in host_matrix.DOC.read_text()


def test_the_matrix_covers_the_families_and_releases_asked_for():
    assert {(r.family, r.release) for r in ROWS} == {
        (family, release)
        for family in ("g4dn", "g5", "g6", "g6e", "p4d", "p5", "p5en", "p6-b200")
        for release in ("22.04", "24.04")
    }


@pytest.mark.parametrize("family", host_matrix.FAMILIES)
def test_every_size_of_a_family_installs_the_same(family):
    """A row stands for its whole family: its sizes agree on everything the steps install by."""
    sizes = [t for t in CATALOG.values() if t.family == family]
    assert sizes, family
    for release in host_matrix.RELEASES:
        params = {
            tuple(
                (k, v)
                for k, v in pins.driver_params(t, release, "580", t.default_kernel_modules).items()
                if k != "GPU_COUNT"
            )
            for t in sizes
        }
        assert len(params) == 1, f"{family}: its sizes differ: {params}"


@needs_sandbox
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.family}-{r.release}")
def test_each_row_is_what_the_scripts_install(tmp_path: Path, row):
    gpu = host_matrix.family_type(row.family)
    host = gpu_host(Sandbox(tmp_path), row.release, gpus=gpu.gpu_count)
    Archive.today(host, row.release)
    before = set(installed(host))
    fast = {"RETRY_BASE_SECONDS": "0.01"}
    driver = pins.driver_params(gpu, row.release, "580", gpu.default_kernel_modules)
    runtime = pins.runtime_params(row.release, "1.35", with_toolkit=True)
    for script, params in (("install-driver.sh", driver), ("install-runtime.sh", runtime)):
        result = host.run(script, {**params, **fast})
        assert result.returncode == 0, f"{script}: {result.stderr}"

    got = {name: version for name, version in installed(host).items() if name not in before}
    wanted = {p.name.replace("<kernel>", KERNEL): p for p in row.packages}
    assert set(got) == set(wanted), (
        f"{row.family} {row.release}: the scripts install {sorted(set(got) - set(wanted))} the "
        f"matrix lacks, and not {sorted(set(wanted) - set(got))} it lists"
    )
    for name, package in wanted.items():
        assert source_of(host, name) == package.source, name
        if package.version.startswith("580.x"):
            assert got[name].startswith(f"{DRIVER}-"), (name, got[name])
        elif package.version[:1].isdigit():
            assert got[name] == package.version, (name, got[name])
    assert host.exists(GSP_OPTIONS) == (row.gsp_firmware == "off")
    assert any("-open-" in name for name in got) == (row.kernel_modules == "open")
    assert host.service_active("nvidia-fabricmanager") == bool(row.fabric)
    loaded = (host.state("modules") or "").split()
    assert ("ib_umad" in loaded) == ("ib_umad" in row.fabric)
