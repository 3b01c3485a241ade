"""The NCCL check: one Job per node with two or more GPUs, after the node's CUDA validation,
running all_reduce_perf against the catalog's floor. The Job's shell runs for real here against
a stand-in all_reduce_perf that prints what nccl-tests prints."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from components.catalog import CATALOG
from components.kube import nccl_validation
from components.kube.manifests import GPU_EXTENDED_RESOURCE
from components.settings import SUPPORTED_KUBERNETES_MINORS, Taint
from tests.helpers import graphs as shared
from tests.helpers.manifests import manifest, stack_minor, validate
from tools.harness.graph import Graph
from tools.harness.stacks import ROOT, STACKS, run_program, stack_file

JOB = "kubernetes:batch/v1:Job"

# nccl-tests all_reduce_perf output (src/common.cu prints the header, one row per size and the
# "Avg bus bandwidth" summary), for one 1 GiB message over 8 GPUs.
NCCL_OUTPUT = """\
# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 1048576(bytes)
#
#       size         count      type   redop    root     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   4400.1  244.02  {busbw}      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {busbw}
#
"""


@cache
def graph(stack: str, overrides: str = "") -> Graph:
    if not overrides:
        return shared.stack_graph(stack)
    return run_program(stack, config=yaml.safe_load(overrides))


def run_command(tmp_path: Path, gpu_type: str, *, busbw: str | None, rc: int = 0):
    fake = tmp_path / "all_reduce_perf"
    body = NCCL_OUTPUT.format(busbw=busbw) if busbw is not None else "NCCL WARN failed\n"
    fake.write_text(f"#!/bin/sh\ncat <<'OUT'\n{body}OUT\nexit {rc}\n")
    fake.chmod(0o755)
    termination = tmp_path / "termination-log"
    command = nccl_validation.all_reduce_command(node_name="n-0", gpu_type=CATALOG[gpu_type])
    command = command.replace(nccl_validation.ALL_REDUCE_PERF, str(fake)).replace(
        "/dev/termination-log", str(termination)
    )
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    message = termination.read_text() if termination.exists() else ""
    return result, message


def test_a_node_at_its_floor_passes(tmp_path):
    result, message = run_command(tmp_path, "p5.48xlarge", busbw="427.52")
    assert result.returncode == 0, result.stderr
    assert "bus bandwidth 427.52 GB/s across 8 GPUs, floor 225 GB/s" in result.stdout
    assert message == ""


def test_a_slow_node_fails_naming_node_stage_floor_and_where_to_look(tmp_path):
    result, message = run_command(tmp_path, "p5.48xlarge", busbw="96.10")
    assert result.returncode == 1
    expected = (
        "node n-0, stage nccl-all-reduce: bus bandwidth 96.10 GB/s across 8 GPUs is below "
        "the floor 225 GB/s of p5.48xlarge"
    )
    assert expected in result.stderr and expected in message
    assert "nvidia-smi nvlink -s" in message and "nvidia-fabricmanager" in message


def test_pcie_types_point_at_peer_to_peer(tmp_path):
    result, message = run_command(tmp_path, "g5.12xlarge", busbw="1.20")
    assert result.returncode == 1
    assert "floor 3 GB/s of g5.12xlarge" in message and "topo -p2p" in message


def test_a_crashed_run_fails_with_its_output(tmp_path):
    result, message = run_command(tmp_path, "p4d.24xlarge", busbw=None, rc=3)
    assert result.returncode == 1
    assert "NCCL WARN failed" in result.stdout
    assert "all_reduce_perf across 8 GPUs failed" in message


@pytest.mark.parametrize("stack", STACKS)
def test_one_nccl_job_per_multi_gpu_node_after_its_cuda_validation(stack):
    g = graph(stack)
    pools = stack_file(stack)["gpu-cluster:nodePools"]
    cluster = stack_file(stack)["gpu-cluster:clusterName"]
    gpus_of = {
        f"{cluster}-{p['name']}-{i}": CATALOG[p["instanceType"]].gpu_count
        for p in pools
        for i in range(p["count"])
    }
    expected = {node for node, gpus in gpus_of.items() if gpus > 1}
    jobs = {
        j.name.removesuffix("-nccl-job"): j for j in g.of_type(JOB) if j.name.endswith("-nccl-job")
    }
    assert set(jobs) == expected, stack
    for node, job in jobs.items():
        cuda = g.named(f"{node}-validation-job")
        assert cuda.urn in g.direct_dependencies(job), job.urn
        others = [n for n in gpus_of if n != node]
        waits_for = [
            u
            for u in g.ancestors(job)
            if u.rsplit("::", 1)[1].startswith(tuple(f"{n}-" for n in others))
        ]
        assert not waits_for, f"{job.urn} waits for other nodes: {waits_for}"
        pod = job.plain_inputs()["spec"]["template"]["spec"]
        container = pod["containers"][0]
        gpus = gpus_of[node]
        assert int(container["resources"]["limits"][GPU_EXTENDED_RESOURCE]) % gpus == 0, job.urn
        assert f"-g {gpus} " in container["command"][2], job.urn
        assert ":" in container["image"] and not container["image"].endswith(":latest")
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        validate(manifest(job), stack_minor(stack), job.urn)


def test_the_nccl_check_can_be_turned_off():
    g = graph("prod", yaml.safe_dump({"validation": {"nccl": False}}))
    assert not g.find(lambda r: "nccl" in r.name)
    assert g.find(lambda r: r.name.endswith("-validation-job"))


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
def test_nccl_job_validates_for_every_supported_minor(minor):
    spec = nccl_validation.nccl_job_spec(
        node_name="c-p-0",
        gpu_type=CATALOG["p5.48xlarge"],
        image="public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9",
        timeout_seconds=900,
        taints=[Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")],
        shares_per_gpu=1,
    )
    obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "c-p-0-nccl"},
        "spec": spec,
    }
    validate(obj, minor, f"nccl job for Kubernetes {minor}")


def _documented_floors() -> dict[str, tuple[str, str]]:
    """docs/multi-node.md's floors table: first cell (the types) -> (one node, two nodes over
    EFA)."""
    text = (ROOT / "docs" / "multi-node.md").read_text(encoding="utf-8")
    table = text.split("| Types | One node, all GPUs | Two nodes over EFA |", 1)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def _gb(cell: str) -> float:
    return float(cell.split(" GB/s", 1)[0])


def test_the_documented_floors_are_the_catalogs():
    """The floors an operator reads in docs/multi-node.md are the ones the checks apply, for
    every catalog type with something to measure (the table groups types by family)."""
    rows = _documented_floors()
    checked = 0
    for gpu_type in CATALOG.values():
        floor = gpu_type.nccl_floor
        if floor.node == 0 and floor.efa == 0:
            continue
        named = rf"\b{re.escape(gpu_type.family)}\b"
        row = next(
            (c for types, c in rows.items() if re.search(named, " ".join([types, *c]))), None
        )
        assert row is not None, f"{gpu_type.name}: no docs floors row names {gpu_type.family}"
        if floor.node:
            assert _gb(row[0]) == floor.node, (gpu_type.name, row)
        if floor.efa:
            assert _gb(row[1]) == floor.efa, (gpu_type.name, row)
        checked += 1
    assert checked > 20, checked
