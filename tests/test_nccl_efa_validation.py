"""The two-node NCCL check over EFA: one Indexed Job per EFA pool of two or more nodes, between
the pool's first two nodes, after both nodes' own checks and before nothing of any node. Its
objects validate strictly, its SSH keys stay secrets, and the pods' shell runs for real here
against stand-ins for ssh, sshd and mpirun that print what nccl-tests and NCCL print."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from components.catalog import CATALOG
from components.kube import nccl_efa_manifests as efa
from components.kube.manifests import GPU_EXTENDED_RESOURCE, tolerates
from components.settings import SUPPORTED_KUBERNETES_MINORS, Taint
from components.settings.constants import DEFAULT_NCCL_IMAGE
from tests.helpers.manifests import manifest, stack_minor, validate
from tools.harness.graph import Graph, Resource, plain_strings
from tools.harness.mocks import ed25519_key
from tools.harness.stacks import STACKS, run_program

JOB = "kubernetes:batch/v1:Job"
SECRET = "kubernetes:core/v1:Secret"
SERVICE = "kubernetes:core/v1:Service"
PRIVATE_KEY = "tls:index/privateKey:PrivateKey"
NAMESPACE = "kubernetes:core/v1:Namespace"
# kubernetes.io "Pod Security Standards", Baseline, Capabilities: the only ones a pod may add.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}

# One prod graph covers each case: a default-EFA pool of two (h100), an opted-in pool of three
# (l40s, paired on its first two), a single-GPU EFA type (a10g: no per-node NCCL Job to follow),
# an EFA pool of one (a100) and an EFA type with EFA off (h100b).
POOLS = [
    {
        "name": "h100",
        "instanceType": "p5.48xlarge",
        "count": 2,
        "taints": [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "training", "effect": "NoExecute"},
        ],
    },
    {"name": "l40s", "instanceType": "g6e.48xlarge", "count": 3, "efa": True},
    {"name": "a10g", "instanceType": "g5.8xlarge", "count": 2, "efa": True},
    {"name": "a100", "instanceType": "p4d.24xlarge", "count": 1},
    {"name": "h100b", "instanceType": "p5.48xlarge", "count": 2, "efa": False},
]
CHECKED = {"h100": "nccl-job", "l40s": "nccl-job", "a10g": "validation-job"}
CLUSTER = "prod-gpu"


@cache
def graph(overrides: str = "") -> Graph:
    config = {"nodePools": POOLS, **(yaml.safe_load(overrides) if overrides else {})}
    return run_program("prod", config=config)


def efa_jobs(g: Graph) -> dict[str, Resource]:
    return {
        j.name.removeprefix(f"{CLUSTER}-").removesuffix("-nccl-efa-job"): j
        for j in g.of_type(JOB)
        if j.name.endswith("-nccl-efa-job")
    }


def node_of(resource: Resource, nodes: list[str]) -> str | None:
    return next((n for n in nodes if resource.name.startswith(f"{n}-")), None)


def all_nodes() -> list[str]:
    return [f"{CLUSTER}-{p['name']}-{i}" for p in POOLS for i in range(p["count"])]


# ---------------------------------------------------------------- where the check exists


def test_one_check_per_efa_pool_of_two_or_more_nodes():
    assert set(efa_jobs(graph())) == set(CHECKED)


@pytest.mark.parametrize(
    "overrides",
    [{"validation": {"nccl": False}}, {"validation": {"enabled": False}}],
    ids=["nccl-off", "validation-off"],
)
def test_no_check_when_nccl_or_validation_is_off(overrides):
    g = graph(yaml.safe_dump(overrides))
    assert not g.find(lambda r: "nccl-efa" in r.name)


@pytest.mark.parametrize("stack", STACKS)
def test_no_stack_file_has_an_efa_pool_to_check(stack):
    """No stack file has an EFA pool of two nodes today (prod's p5 pool says `efa: false`), so
    their identity snapshots and preview digests do not change; a stack that gets one gets the
    check (the graph cases above)."""
    g = run_program(stack)
    assert not g.find(lambda r: "nccl-efa" in r.name), stack


# ---------------------------------------------------------------- the graph


@pytest.mark.parametrize("pool", sorted(CHECKED))
def test_the_check_follows_both_nodes_own_checks_and_only_theirs(pool):
    g = graph()
    job = efa_jobs(g)[pool]
    pair = [f"{CLUSTER}-{pool}-0", f"{CLUSTER}-{pool}-1"]
    for node in pair:
        last = g.named(f"{node}-{CHECKED[pool]}")
        assert last.urn in g.direct_dependencies(job), f"{job.urn} does not follow {last.urn}"
    others = [n for n in all_nodes() if n not in pair]
    waits_for = [u for u in g.ancestors(job) if node_of(g.by_urn[u], others)]
    assert not waits_for, f"{job.urn} waits for nodes outside its pair: {waits_for}"


def test_no_node_waits_for_a_two_node_check():
    g = graph()
    checks = {j.urn for j in efa_jobs(g).values()}
    nodes = all_nodes()
    for resource in g:
        if node_of(resource, nodes):
            waits = checks & g.ancestors(resource)
            assert not waits, f"{resource.urn} waits for the two-node check {waits}"


# ---------------------------------------------------------------- the pods


@pytest.mark.parametrize("pool", sorted(CHECKED))
def test_pods_pinned_to_the_pair_with_every_gpu_and_efa_interface(pool):
    g = graph()
    job = efa_jobs(g)[pool]
    spec = job.plain_inputs()["spec"]
    gpu_type = CATALOG[next(p["instanceType"] for p in POOLS if p["name"] == pool)]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}, job.urn
    pod = spec["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    values = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"]
    assert values == [f"{CLUSTER}-{pool}-0", f"{CLUSTER}-{pool}-1"], job.urn
    apart = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert apart[0]["topologyKey"] == "kubernetes.io/hostname", job.urn
    assert apart[0]["labelSelector"]["matchLabels"].items() <= (
        spec["template"]["metadata"]["labels"].items()
    ), job.urn
    (container,) = pod["containers"]
    limits = container["resources"]["limits"]
    assert limits[GPU_EXTENDED_RESOURCE] == str(gpu_type.gpu_count), job.urn
    assert limits[efa.EFA_EXTENDED_RESOURCE] == str(gpu_type.efa_interfaces), job.urn
    assert container["resources"]["requests"] == limits, job.urn
    assert f"-np {2 * gpu_type.gpu_count} -N {gpu_type.gpu_count} " in container["command"][2]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env, job.urn
    written = next(p for p in POOLS if p["name"] == pool).get("taints")
    default = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    for taint in [Taint(**t) for t in written or default]:
        assert tolerates(pod["tolerations"], taint), f"{job.urn} does not tolerate {taint}"


def test_pods_stay_within_pod_security_baseline_and_images_are_pinned():
    g = graph()
    namespaces = {
        n.plain_inputs()["metadata"]["name"]: n.plain_inputs()["metadata"]["labels"]
        for n in g.of_type(NAMESPACE)
    }
    for job in efa_jobs(g).values():
        inputs = job.plain_inputs()
        level = namespaces[inputs["metadata"]["namespace"]]["pod-security.kubernetes.io/enforce"]
        assert level == "baseline", job.urn
        pod = inputs["spec"]["template"]["spec"]
        assert not {"hostNetwork", "hostPID", "hostIPC"} & pod.keys(), job.urn
        assert not [v for v in pod["volumes"] if "hostPath" in v], job.urn
        for container in pod["containers"]:
            image = container["image"]
            assert image == DEFAULT_NCCL_IMAGE, job.urn
            assert ":" in image.rsplit("/", 1)[1] and not image.endswith(":latest"), image
            context = container["securityContext"]
            assert not context.get("privileged") and context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"], job.urn
            assert set(context["capabilities"]["add"]) <= BASELINE_CAPABILITIES, job.urn


def test_service_and_secret_are_the_ones_the_pods_use():
    g = graph()
    job = efa_jobs(g)["h100"]
    pod = job.plain_inputs()["spec"]["template"]
    service = g.named(f"{CLUSTER}-h100-nccl-efa-service").plain_inputs()
    secret = g.named(f"{CLUSTER}-h100-nccl-efa-ssh").plain_inputs()
    assert (
        pod["spec"]["subdomain"]
        == service["metadata"]["name"]
        == job.plain_inputs()["metadata"]["name"]
    )
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (volume,) = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    for dependency in (f"{CLUSTER}-h100-nccl-efa-ssh", f"{CLUSTER}-h100-nccl-efa-service"):
        assert g.named(dependency).urn in g.direct_dependencies(job), dependency


@pytest.mark.parametrize("kind", [JOB, SERVICE, SECRET])
def test_objects_validate_strictly_for_the_stack_minor(kind):
    g = graph()
    found = [r for r in g.of_type(kind) if "nccl-efa" in r.name]
    assert len(found) == len(CHECKED), kind
    for resource in found:
        validate(manifest(resource), stack_minor("prod"), resource.urn)


@pytest.mark.parametrize("minor", SUPPORTED_KUBERNETES_MINORS)
def test_the_job_validates_for_every_supported_minor(minor):
    pair = efa.EfaPair("h100", ("c-h100-0", "c-h100-1"), CATALOG["p5.48xlarge"])
    job = efa.job_name("c-h100")
    spec = efa.two_node_job_spec(
        pair,
        job=job,
        image=DEFAULT_NCCL_IMAGE,
        timeout_seconds=900,
        taints=[Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")],
        shares_per_gpu=2,
    )
    validate(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job}, "spec": spec},
        minor,
        f"two-node NCCL Job for Kubernetes {minor}",
    )
    validate(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": job},
            "spec": efa.service_spec(job),
        },
        minor,
        f"two-node NCCL Service for Kubernetes {minor}",
    )


def test_a_long_pool_name_still_gives_hostnames_that_are_dns_labels():
    job = efa.job_name("a-cluster-name-of-thirty-chars-" + "p" * 30)
    assert len(f"{job}-1") <= 63 and job == efa.job_name(
        "a-cluster-name-of-thirty-chars-" + "p" * 30
    )


# ---------------------------------------------------------------- the SSH keys


def test_ssh_keys_are_pulumi_secrets_and_each_side_trusts_the_other():
    g = graph()
    keys = {r.name: r for r in g.of_type(PRIVATE_KEY) if "nccl-efa" in r.name}
    assert set(keys) == {
        f"{CLUSTER}-{pool}-nccl-efa-ssh-{role}-key"
        for pool in CHECKED
        for role in ("client", "host")
    }
    bodies = []
    for key in keys.values():
        assert {"privateKeyOpenssh", "privateKeyPem"} <= set(key.additional_secret_outputs)
        private = ed25519_key(key.name)["privateKeyOpenssh"]  # what the mock provider made
        bodies += [line for line in private.splitlines()[1:-1] if len(line) > 20]
    for pool in CHECKED:
        secret = g.named(f"{CLUSTER}-{pool}-nccl-efa-ssh")
        assert "stringData" in g.secret_inputs(secret), f"{secret.urn}: keys not a secret input"
        data = secret.plain_inputs()["stringData"]
        client = ed25519_key(f"{CLUSTER}-{pool}-nccl-efa-ssh-client-key")
        host = ed25519_key(f"{CLUSTER}-{pool}-nccl-efa-ssh-host-key")
        assert data[efa.CLIENT_KEY] == client["privateKeyOpenssh"]
        assert data[efa.AUTHORIZED_KEYS] == client["publicKeyOpenssh"]
        assert data[efa.HOST_KEY] == host["privateKeyOpenssh"]
        assert data[efa.KNOWN_HOSTS] == f"{efa.HOST_KEY_ALIAS} {host['publicKeyOpenssh']}"
    assert bodies
    for resource in g:
        for text in [*plain_strings(resource.inputs), *plain_strings(resource.outputs)]:
            assert not any(body in text for body in bodies), f"{resource.urn}: plain private key"


# ---------------------------------------------------------------- the pods' shell, run for real

PAIR = efa.EfaPair("h100", ("n-0", "n-1"), CATALOG["p5.48xlarge"])
WHERE = "pool h100 (nodes n-0 and n-1), stage nccl-efa-all-reduce"
EFA_LOG = """\
n-0:41:41 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)
n-0:41:41 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.3
n-0:41:41 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)
n-0:41:41 [0] NCCL INFO Using network Libfabric
n-1:52:52 [0] NCCL INFO Using network Libfabric
n-0:41:60 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA
"""
SOCKET_LOG = """\
n-0:41:41 [0] NCCL INFO NET/OFI aws-ofi-nccl initialization failed
n-0:41:41 [0] NCCL INFO NET/IB : No device found.
n-0:41:41 [0] NCCL INFO NET/Socket : Using [0]eth0:10.244.3.7<0>
n-0:41:41 [0] NCCL INFO Using network Socket
n-1:52:52 [0] NCCL INFO Using network Socket
"""
# nccl-tests all_reduce_perf (src/common.cu), one 1 GiB message over 16 ranks of one GPU each.
RESULTS = """\
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 1073741824 step: 1048576(bytes)
#       size         count      type   redop    root     time   algbw   busbw #wrong
  1073741824     268435456     float     sum      -1   9800.2  109.56  {busbw}      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {busbw}
"""


def write_stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def run_pod(tmp_path: Path, index: str | None, *, mpi_out: str = "", mpi_rc: int = 0, **env):
    """Run the pods' command with stubs for ssh, sshd, mpirun, hostname and sleep first on
    PATH (sshd and mpirun by the absolute paths the command uses, replaced); returns the run,
    the termination message and what each stub was called with."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    log = f'echo "$(basename "$0") $*" >>{calls}\n'
    (tmp_path / "mpi.out").write_text(mpi_out)
    write_stub(stubs / "mpirun", log + f"cat {tmp_path / 'mpi.out'}\nexit {mpi_rc}\n")
    write_stub(
        stubs / "ssh",
        log + 'n=$(grep -c "^ssh " "' + str(calls) + '")\n'
        '[ "$n" -gt "${SSH_FAILURES:-0}" ] || { echo "ssh: Could not resolve hostname" >&2; '
        "exit 255; }\n",
    )
    write_stub(stubs / "sshd", log + 'case "$1" in -t) exit "${SSHD_TEST_RC:-0}" ;; esac\n')
    write_stub(stubs / "hostname", "echo c-h100-nccl-efa-0\n")
    write_stub(stubs / "sleep", ":\n")
    termination = tmp_path / "termination-log"
    command = (
        efa.two_node_command(PAIR, job="c-h100-nccl-efa", ssh_wait_seconds=10)
        .replace(efa.MPIRUN, str(stubs / "mpirun"))
        .replace(efa.SSHD, str(stubs / "sshd"))
        .replace("/dev/termination-log", str(termination))
    )
    environment = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", **env}
    environment.pop("JOB_COMPLETION_INDEX", None)
    if index is not None:
        environment["JOB_COMPLETION_INDEX"] = index
    result = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=environment, check=False
    )
    message = termination.read_text() if termination.exists() else ""
    called = calls.read_text().splitlines() if calls.exists() else []
    return result, message, called


def test_two_nodes_at_their_floor_pass(tmp_path):
    result, message, called = run_pod(
        tmp_path, "0", mpi_out=EFA_LOG + RESULTS.format(busbw="171.40")
    )
    assert result.returncode == 0, result.stderr
    assert f"{WHERE}: bus bandwidth 171.40 GB/s over EFA, floor 160 GB/s" in result.stdout
    assert message == ""
    ssh = next(c for c in called if c.startswith("ssh "))
    assert f"-p {efa.SSH_PORT} " in ssh and "StrictHostKeyChecking=yes" in ssh
    assert ssh.endswith(" c-h100-nccl-efa-1.c-h100-nccl-efa true"), ssh
    mpirun = next(c for c in called if c.startswith("mpirun "))
    assert "--hostfile " in mpirun and "-np 16 -N 8 " in mpirun and "-x FI_PROVIDER " in mpirun


def test_the_launcher_waits_for_the_second_pods_sshd(tmp_path):
    result, _, called = run_pod(
        tmp_path, "0", mpi_out=EFA_LOG + RESULTS.format(busbw="200"), SSH_FAILURES="2"
    )
    assert result.returncode == 0, result.stderr
    assert [c.split()[0] for c in called] == ["ssh", "ssh", "ssh", "mpirun"]


def test_no_ssh_to_the_second_pod_fails_naming_it(tmp_path):
    result, message, called = run_pod(tmp_path, "0", SSH_FAILURES="99")
    assert result.returncode == 1
    assert message.startswith(f"{WHERE}: no SSH login to the second pod c-h100-nccl-efa-1")
    assert "Could not resolve hostname" in result.stderr
    assert not [c for c in called if c.startswith("mpirun")]


def test_two_nodes_below_the_floor_fail_naming_pool_nodes_stage_and_floor(tmp_path):
    result, message, _ = run_pod(tmp_path, "0", mpi_out=EFA_LOG + RESULTS.format(busbw="41.02"))
    assert result.returncode == 1
    expected = (
        f"{WHERE}: bus bandwidth 41.02 GB/s over EFA between the two nodes is below the floor "
        "160 GB/s of p5.48xlarge"
    )
    assert expected in message and expected in result.stderr
    assert "fi_info -p efa must list 32" in message and "placement group" in message


def test_nccl_on_tcp_sockets_fails_whatever_its_bandwidth(tmp_path):
    result, message, _ = run_pod(tmp_path, "0", mpi_out=SOCKET_LOG + RESULTS.format(busbw="999"))
    assert result.returncode == 1
    assert message.startswith(f"{WHERE}: NCCL used network(s) Socket instead of Libfabric")
    assert "vpc.amazonaws.com/efa" in message and "did not run over EFA" in message


def test_libfabric_without_the_efa_provider_fails(tmp_path):
    log = EFA_LOG.replace("provider is efa, fabric is efa-direct", "provider is tcp, fabric is tcp")
    result, message, _ = run_pod(tmp_path, "0", mpi_out=log + RESULTS.format(busbw="999"))
    assert result.returncode == 1
    assert "aws-ofi-nccl did not select libfabric's efa provider" in message


def test_a_failed_mpirun_fails_with_its_output(tmp_path):
    result, message, _ = run_pod(
        tmp_path, "0", mpi_out="ORTE was unable to reliably start one or more daemons.\n", mpi_rc=1
    )
    assert result.returncode == 1
    assert "ORTE was unable to reliably start" in result.stdout
    assert message.startswith(f"{WHERE}: mpirun of all_reduce_perf across 2 nodes x 8 GPUs failed")
    assert "EFA security group" in message


def test_the_second_pod_serves_ssh_for_mpirun(tmp_path):
    result, message, called = run_pod(tmp_path, "1")
    assert result.returncode == 0, result.stderr
    assert [c.split()[:2] for c in called] == [["sshd", "-t"], ["sshd", "-D"]]
    for flag in (f"-p {efa.SSH_PORT}", "-f /dev/null", "UsePAM=no", "PasswordAuthentication=no"):
        assert flag in called[1], called[1]
    assert message == ""


def test_a_broken_ssh_secret_fails_on_the_second_pod(tmp_path):
    result, message, called = run_pod(tmp_path, "1", SSHD_TEST_RC="1")
    assert result.returncode == 1
    assert message.startswith(f"{WHERE}: sshd refuses its configuration")
    assert len(called) == 1


def test_a_pod_without_a_completion_index_fails(tmp_path):
    result, message, _ = run_pod(tmp_path, None)
    assert result.returncode == 1 and "JOB_COMPLETION_INDEX is ''" in message


def test_the_pods_shell_passes_shellcheck(tmp_path):
    script = tmp_path / "nccl-efa.sh"
    script.write_text("#!/bin/sh\n" + efa.two_node_command(PAIR, job="c-h100-nccl-efa"))
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    result = subprocess.run(
        [shellcheck, "--shell=sh", "--severity=style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_the_policy_pack_passes_a_stack_with_two_node_checks():
    """Through pulumi_policy's analyzer, as in tests/test_policies.py: pinned images, bounded
    Jobs, secrets kept secret."""
    from tests.helpers.policies import analyze, as_policy_input

    found = analyze([as_policy_input(r) for r in graph()])
    assert found == [], "\n".join(f"{p} {u}: {m}" for p, u, m, _ in found)
