"""Each node's validation on the recorded graph: the capacity wait (the join's own, through the
API with the node's credentials), then the Job pinned to the node, a child of its GpuNode."""

from __future__ import annotations

import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from components.catalog import CATALOG
from components.kube import manifests
from components.settings import NodePool
from tests.helpers import graphs as shared
from tools.harness.graph import Graph, Resource
from tools.harness.stacks import STACKS, run_program, stack_file

DAEMON_SET = "nvidia-device-plugin-daemonset"


@cache
def graph(stack: str) -> Graph:
    return shared.stack_graph(stack)


def nodes(stack: str) -> list[tuple[str, NodePool]]:
    """(node name, pool) for every node of a stack file."""
    config = stack_file(stack)
    cluster = config["gpu-cluster:clusterName"]
    found = []
    for raw in config["gpu-cluster:nodePools"]:
        pool = NodePool.model_validate(raw)
        found += [(f"{cluster}-{pool.name}-{i}", pool) for i in range(pool.count)]
    return found


def replicas(stack: str) -> int:
    plugin = stack_file(stack).get("gpu-cluster:devicePlugin", {})
    return int(plugin.get("timeSlicing", {}).get("replicas", 1))


def timeout_seconds(stack: str) -> int:
    return int(stack_file(stack).get("gpu-cluster:validation", {}).get("timeoutSeconds", 900))


def script_param(step: Resource, name: str) -> str:
    stdin = step.plain_inputs()["stdin"]
    match = re.search(rf"^{name}=(\S+)$", stdin, re.M)
    assert match, f"{step.urn}: no {name}= in the rendered script"
    return match.group(1).strip("'")


def job_pod(job: Resource) -> dict:
    return job.plain_inputs()["spec"]["template"]["spec"]


@pytest.mark.parametrize("stack", STACKS)
def test_each_validation_waits_for_its_node_and_the_daemon_set_only(stack):
    g = graph(stack)
    ds = g.named(DAEMON_SET)
    names = [name for name, _ in nodes(stack)]
    for name in names:
        job = g.named(f"{name}-validation-job")
        join = g.named(f"{name}-join")
        # The join saw the node Ready with every GPU allocatable: the Job follows it directly.
        assert join.urn in g.direct_dependencies(job), f"{job.urn} must wait for {join.urn}"
        assert ds.urn in g.direct_dependencies(job), f"{job.urn} must wait for {ds.urn}"
        assert g.depends_on(join, ds), f"{join.urn}'s capacity wait needs the device plugin"
        assert job.parent == g.named(f"{name}-node").urn, f"{job.urn}: not a child of its node"
        others = {
            g.named(f"{other}-{suffix}").urn
            for other in names
            if other != name
            for suffix in ("join", "validation-job")
        }
        assert not g.ancestors(job) & others, (
            f"{job.urn} waits for other nodes: {sorted(g.ancestors(job) & others)}"
        )


@pytest.mark.parametrize("stack", STACKS)
def test_the_join_waits_on_the_node_for_count_times_replicas(stack):
    """wait-gpu-capacity.sh ran on the control plane; the join now waits itself, on the node,
    for every GPU of the instance type (each time-sliced share), within validation's bound."""
    g = graph(stack)
    for name, pool in nodes(stack):
        join = g.named(f"{name}-join")
        wait_ready = g.named(f"{name}-wait-ready")
        host = join.plain_inputs()["connection"]["host"]
        assert host == wait_ready.plain_inputs()["connection"]["host"], (
            f"{join.urn} runs on {host}, not on the node like {wait_ready.urn}"
        )
        expected = CATALOG[pool.instance_type].gpu_count * replicas(stack)
        assert script_param(join, "NODE_NAME") == name, f"{join.urn}"
        assert script_param(join, "EXPECTED_GPUS") == str(expected), (
            f"{join.urn}: EXPECTED_GPUS {script_param(join, 'EXPECTED_GPUS')}, "
            f"want {expected} ({pool.instance_type} x {replicas(stack)} replicas)"
        )
        bound = int(script_param(join, "CAPACITY_TIMEOUT_SECONDS"))
        assert bound == timeout_seconds(stack), f"{join.urn}: CAPACITY_TIMEOUT_SECONDS {bound}"
        create = join.custom_timeouts.get("create", "")
        assert create.endswith("s") and int(create[:-1]) > bound, (
            f"{join.urn}: step timeout {create} must exceed the capacity bound {bound}s"
        )


@pytest.mark.parametrize("stack", STACKS)
def test_job_requests_exactly_the_nodes_gpus_and_is_pinned_to_it(stack):
    g = graph(stack)
    for name, pool in nodes(stack):
        job = g.named(f"{name}-validation-job")
        count = str(CATALOG[pool.instance_type].gpu_count)
        # Every nvidia.com/gpu the node advertises: GPUs x time-slicing replicas.
        shares = str(CATALOG[pool.instance_type].gpu_count * replicas(stack))
        pod = job_pod(job)
        (container,) = pod["containers"]
        resources = container["resources"]
        assert resources["limits"] == {"nvidia.com/gpu": shares}, (
            f"{job.urn}: {resources}, want all {shares} shares of {name}"
        )
        assert resources.get("requests", resources["limits"]) == resources["limits"], (
            f"{job.urn}: {resources}"
        )
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        ], f"{job.urn} is not pinned to {name}: {terms}"
        for taint in pool.taints:
            assert manifests.tolerates(pod["tolerations"], taint), (
                f"{job.urn} does not tolerate {taint} of {name}: {pod['tolerations']}"
            )
        assert f"-ne {count} ]" in container["command"][-1], f"{job.urn}: {container['command']}"
        assert "nvidia-smi -L" in container["command"][-1], f"{job.urn}"


@pytest.mark.parametrize("stack", STACKS)
def test_job_fails_up_when_validation_fails(stack):
    g = graph(stack)
    image = stack_file(stack).get("gpu-cluster:validation", {}).get("image")
    for name, _ in nodes(stack):
        job = g.named(f"{name}-validation-job")
        inputs = job.plain_inputs()
        spec = inputs["spec"]
        bound = timeout_seconds(stack)
        assert spec["backoffLimit"] == 1, f"{job.urn}: backoffLimit {spec['backoffLimit']}"
        assert spec["activeDeadlineSeconds"] == bound, f"{job.urn}: {spec}"
        assert job_pod(job)["restartPolicy"] == "Never", f"{job.urn}"
        annotations = inputs["metadata"].get("annotations") or {}
        assert "pulumi.com/skipAwait" not in annotations, f"{job.urn}: the Job must be awaited"
        create = job.custom_timeouts.get("create", "")
        assert create.endswith("s") and int(create[:-1]) > bound, (
            f"{job.urn}: create timeout {create} must outlast activeDeadlineSeconds {bound}"
        )
        assert inputs["metadata"]["name"] == f"{name}-validation", f"{job.urn}"
        assert inputs["metadata"]["namespace"] == manifests.VALIDATION_NAMESPACE, f"{job.urn}"
        want_image = image or "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
        assert job_pod(job)["containers"][0]["image"] == want_image, f"{job.urn}"
        assert job.delete_before_replace, f"{job.urn}: same-name replacement needs delete first"


@pytest.mark.parametrize("stack", STACKS)
def test_job_runs_again_for_a_new_machine_a_new_cluster_or_a_change_of_the_node(stack):
    """The Job follows its machine and cluster (replacement_trigger) and what the node's
    disruptive steps install (its pod template's node-change annotation, the roll's CHANGE);
    the capacity step's id its template carried before is ignored (decision 027), and it
    continues the Job of the GpuValidation component it was a child of."""
    g = graph(stack)
    endpoint = g.outputs["endpoint"]
    for name, _ in nodes(stack):
        job = g.named(f"{name}-validation-job")
        assert job.replacement_trigger == [g.named(name).id, endpoint], f"{job.urn}"
        template = job.plain_inputs()["spec"]["template"]["metadata"]
        change = g.named(f"{name}-in-service").plain_inputs()["environment"]["CHANGE"]
        assert template["annotations"][manifests.NODE_CHANGE_ANNOTATION] == change, job.urn
        assert manifests.CAPACITY_CHECK_ANNOTATION not in template["annotations"], job.urn
        # ...and so are its tolerations: they placed a run that happened (decision 059).
        assert job.ignore_changes == [
            f'spec.template.metadata.annotations["{manifests.CAPACITY_CHECK_ANNOTATION}"]',
            manifests.JOB_TOLERATIONS,
        ], f"{job.urn}: {job.ignore_changes}"
        former = (
            f"urn:pulumi:{stack}::gpu-cluster::gpu-cluster:index:GpuValidation"
            f"$kubernetes:batch/v1:Job::{name}-validation-job"
        )
        assert {"urn": former} in job.aliases, f"{job.urn}: {job.aliases}"


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_report_model_count_and_validation_per_node(stack):
    g = graph(stack)
    outputs = g.outputs["gpuNodes"]
    for name, pool in nodes(stack):
        gpu = CATALOG[pool.instance_type]
        got = outputs[name]
        assert got["gpuModel"] == gpu.gpu.name, f"stack {stack} output gpuNodes.{name}: {got}"
        assert got["gpuCount"] == gpu.gpu_count, f"stack {stack} output gpuNodes.{name}: {got}"
        assert got["validated"] is True, f"stack {stack} output gpuNodes.{name}: {got}"
    assert not g.of_type("gpu-cluster:index:GpuValidation"), "a component per node too many"


def test_validation_disabled_creates_no_checks():
    g = run_program("staging", config={"validation": {"enabled": False}})
    checks = g.find(lambda r: r.name.endswith("-validation-job"))
    assert not checks, f"validation disabled, yet {[r.urn for r in checks]}"
    assert g.of_type("kubernetes:apps/v1:DaemonSet"), "the device plugin is deployed anyway"
    for name, _ in nodes("staging"):
        got = g.outputs["gpuNodes"][name]
        assert got["validated"] == "disabled", f"output gpuNodes.{name}: {got}"
        # The join still waits for its Node Ready, not for its GPUs.
        join = g.named(f"{name}-join")
        assert script_param(join, "EXPECTED_GPUS") == "", f"{join.urn}: a capacity check"


def test_time_slicing_job_takes_every_share_and_checks_physical_gpus():
    """With replicas > 1 a request for N shares may land on fewer than N GPUs (the plugin only
    prefers distinct GPUs), so the Job takes all shares and counts the physical GPUs."""
    g = run_program("dev", config={"devicePlugin": {"timeSlicing": {"replicas": 4}}})
    (name, pool), *_ = nodes("dev")
    count = CATALOG[pool.instance_type].gpu_count
    join = g.named(f"{name}-join")
    job = g.named(f"{name}-validation-job")
    assert script_param(join, "EXPECTED_GPUS") == str(count * 4), f"{join.urn}"
    (container,) = job_pod(job)["containers"]
    limits = container["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": str(count * 4)}, f"{job.urn}: {limits}"
    assert limits["nvidia.com/gpu"] == script_param(join, "EXPECTED_GPUS"), (
        f"{job.urn} must request exactly what {join.urn} waited for"
    )
    assert f"-ne {count} ]" in container["command"][-1], (
        f"{job.urn}: the count check is on the {count} physical GPUs: {container['command']}"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_job_is_replaced_not_updated_and_stays_after_success(stack):
    """A Job that ran is the record of the node's validation: any spec change (a new timeout
    too) must run a new one, and nothing may delete it behind Pulumi's back (a TTL would make
    `pulumi up --refresh` re-create it and validate again)."""
    g = graph(stack)
    for name, _ in nodes(stack):
        job = g.named(f"{name}-validation-job")
        assert "spec" in job.replace_on_changes, (
            f"{job.urn}: replaceOnChanges {job.replace_on_changes}, want spec"
        )
        assert job.delete_before_replace, f"{job.urn}: same-name replacement needs delete first"
        spec = job.plain_inputs()["spec"]
        assert "ttlSecondsAfterFinished" not in spec, f"{job.urn}: {spec}"
        annotations = job.plain_inputs()["metadata"].get("annotations") or {}
        assert annotations.get(manifests.REPLACE_UNREADY_ANNOTATION) == "true", (
            f"{job.urn}: a failed Job must be replaced on the next up, not awaited: {annotations}"
        )


@pytest.mark.parametrize("stack", STACKS)
def test_pod_gets_nvidia_smi_and_cuda_from_the_runtime(stack):
    g = graph(stack)
    for name, _ in nodes(stack):
        job = g.named(f"{name}-validation-job")
        (container,) = job_pod(job)["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        capabilities = set((env.get("NVIDIA_DRIVER_CAPABILITIES") or "").split(","))
        assert {"compute", "utility"} <= capabilities, (
            f"{job.urn}: NVIDIA_DRIVER_CAPABILITIES {env.get('NVIDIA_DRIVER_CAPABILITIES')!r} "
            "must include utility (nvidia-smi) and compute (CUDA)"
        )
        assert "NVIDIA_VISIBLE_DEVICES" not in env, (
            f"{job.urn}: the device plugin sets NVIDIA_VISIBLE_DEVICES; the pod must not"
        )
        assert manifests.CUDA_SAMPLE_BINARY == "/cuda-samples/sample", f"{job.urn}"
        assert manifests.CUDA_SAMPLE_BINARY in container["command"][-1], f"{job.urn}"


def test_long_node_names_give_valid_job_names():
    long = "a" * 40 + "-" + "b" * 40 + "-999"
    name = manifests.validation_job_name(long)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert name != manifests.validation_job_name(long[:-1] + "8"), "names must stay distinct"
    assert manifests.validation_job_name("n-0") == "n-0-validation"


# ---------------------------------------------------------------- the pod's command, for real


@pytest.fixture
def fake_image(tmp_path: Path):
    """A PATH with a fake nvidia-smi and a fake CUDA sample that logs CUDA_VISIBLE_DEVICES."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sample.log"

    def run(gpus: int, expected: int, sample_exit: int = 0) -> subprocess.CompletedProcess:
        smi = bin_dir / "nvidia-smi"
        listing = "".join(f"echo 'GPU {i}: NVIDIA A10G (UUID: GPU-{i})'\n" for i in range(gpus))
        smi.write_text(f"#!/bin/sh\n{listing}")
        sample = bin_dir / "sample"
        sample.write_text(f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES" >> {log}\nexit {sample_exit}\n')
        for f in (smi, sample):
            f.chmod(0o755)
        command = manifests.validation_command(expected).replace(
            manifests.CUDA_SAMPLE_BINARY, str(sample)
        )
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        return subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, env=env, check=False
        )

    run.log = log
    return run


def test_pod_command_runs_the_sample_on_every_gpu(fake_image):
    result = fake_image(gpus=4, expected=4)
    assert result.returncode == 0, f"validation command: {result.stdout}{result.stderr}"
    assert fake_image.log.read_text().split() == ["0", "1", "2", "3"], "sample per GPU"
    assert "validated 4 GPU(s)" in result.stdout, result.stdout


def test_pod_command_fails_on_a_missing_gpu(fake_image):
    result = fake_image(gpus=3, expected=4)
    assert result.returncode != 0, f"validation command passed with 3 of 4: {result.stdout}"
    assert "expected 4 GPU(s), nvidia-smi -L lists 3" in result.stderr, result.stderr
    assert not fake_image.log.exists(), "the sample must not run after a failed count"


def test_pod_command_fails_when_cuda_fails(fake_image):
    result = fake_image(gpus=2, expected=2, sample_exit=1)
    assert result.returncode != 0, f"validation command passed a failing kernel: {result.stdout}"


# ---------------------------------------------------------------- GPU isolation


def toolkit_visible_devices(toolkit: dict, container: dict, plugin_mounts: list[str]) -> list[str]:
    """Which GPUs the NVIDIA runtime hands a container: nvidia-container-toolkit
    internal/config/image/cuda_image.go, `VisibleDevices`: the device plugin's volume mounts when
    accept-nvidia-visible-devices-as-volume-mounts is on, else NVIDIA_VISIBLE_DEVICES, honoured
    only for privileged containers or with accept-nvidia-visible-devices-envvar-when-unprivileged
    (the toolkit's default is true: api/config/v1/toml.go)."""
    if toolkit.get("accept-nvidia-visible-devices-as-volume-mounts", False) and plugin_mounts:
        return plugin_mounts
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    requested = env.get("NVIDIA_VISIBLE_DEVICES", "")
    if requested in ("", "void", "none"):
        return []
    privileged = (container.get("securityContext") or {}).get("privileged", False)
    if privileged or toolkit.get("accept-nvidia-visible-devices-envvar-when-unprivileged", True):
        return ["0", "1", "2", "3"] if requested == "all" else requested.split(",")
    return []


def run_isolation_pod(tmp_path: Path, toolkit: dict) -> subprocess.CompletedProcess:
    """The isolation Job's pod on a 4-GPU node: the runtime injects nvidia-smi (listing what it
    handed out) only when it handed out a GPU; the device plugin mounts nothing (no request)."""
    spec = manifests.validation_job_spec(
        node_name="n", gpu_count=4, image="cuda:12", timeout_seconds=60
    )
    (container,) = spec["template"]["spec"]["initContainers"]
    assert "resources" not in container, "the isolation container must request no GPU"
    visible = toolkit_visible_devices(toolkit, container, plugin_mounts=[])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if visible:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n"
            + "".join(f'echo "GPU {i}: NVIDIA A10G (UUID: GPU-{i})"\n' for i in visible)
        )
        smi.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(
        ["sh", "-c", container["command"][2]], capture_output=True, text=True, env=env, check=False
    )


def test_isolation_pod_sees_no_gpu_with_the_toolkit_config_the_runtime_step_writes(tmp_path):
    toolkit = {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "accept-nvidia-visible-devices-as-volume-mounts": True,
    }
    result = run_isolation_pod(tmp_path, toolkit)
    assert result.returncode == 0, result.stderr
    assert "no GPU visible to a pod that requested none" in result.stdout


def test_isolation_pod_fails_when_the_runtime_hands_out_gpus_by_environment_variable(tmp_path):
    """The toolkit's default: NVIDIA_VISIBLE_DEVICES=all from any pod gets every GPU."""
    result = run_isolation_pod(tmp_path, {})
    assert result.returncode == 1
    assert "a pod that requested no GPU sees GPUs" in result.stderr
    assert "GPU 3: NVIDIA A10G" in result.stderr


@pytest.mark.parametrize("stack", STACKS)
def test_each_validation_pod_first_checks_that_no_request_means_no_gpu(stack):
    g = graph(stack)
    for node, _pool in nodes(stack):
        job = g.named(f"{node}-validation-job")
        pod = job_pod(job)
        (isolation,) = pod["initContainers"]
        env = {e["name"]: e["value"] for e in isolation["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all", f"{job.urn}: {env}"
        assert "resources" not in isolation, f"{job.urn}: requests {isolation.get('resources')}"
        assert not (isolation.get("securityContext") or {}).get("privileged"), f"{job.urn}"
        assert isolation["command"][2] == manifests.isolation_command(), f"{job.urn}"


def test_a_job_without_a_status_has_not_passed():
    """The provider may answer before the Job controller wrote a status (None, or no count):
    that is not a pass, and not a crash of the program either."""
    from components.kube.validation import _succeeded

    assert _succeeded(None) is False
    assert _succeeded({}) is False
    assert _succeeded({"succeeded": 0}) is False
    assert _succeeded({"succeeded": 1}) is True
