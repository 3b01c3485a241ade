"""The Kubernetes objects of the two-node NCCL check over EFA, as plain data (like
components/kube/manifests.py: pure functions, no Pulumi; tests validate the same dicts).

nccl-tests spans nodes only as an MPI program, so two nodes run one `all_reduce_perf` the way
Kubeflow's mpi-operator runs the image, without an operator: one Indexed Job of two pods behind
a headless Service; index 1 runs sshd, index 0 waits until it can log in there and runs `mpirun`
over SSH; `successPolicy` ends the Job when index 0 succeeds. Both pods take every GPU and EFA
interface of their node and run at Pod Security `baseline` (sshd keeps SETUID, SETGID,
SYS_CHROOT and KILL; nothing is privileged).

Why: docs/decisions/011-two-node-nccl-as-one-indexed-job.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from components.catalog import GpuInstanceType
from components.kube.manifests import (
    GPU_EXTENDED_RESOURCE,
    MANAGED_BY,
    MAX_NAME_LENGTH,
    UNSCHEDULABLE_TOLERATION,
    VALIDATION_NAMESPACE,
    fitted_name,
    node_agent_tolerations,
)
from components.kube.nccl_validation import ALL_REDUCE_PERF, MESSAGE_BYTES, SHM_SIZE
from components.labels import EFA_RESOURCE, POOL_LABEL
from components.settings import Taint

STAGE = "nccl-efa-all-reduce"
CONTAINER = "nccl-efa-all-reduce"
EFA_EXTENDED_RESOURCE = EFA_RESOURCE  # what the AWS EFA device plugin advertises
CHECK_LABEL = "gpu-cluster.io/nccl-efa-check"
OPENMPI_PREFIX = "/opt/amazon/openmpi"  # where the EFA installer puts Open MPI (image PATH)
MPIRUN = f"{OPENMPI_PREFIX}/bin/mpirun"
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself, so it must be started by absolute path
SSH_PORT = 2222
SSH_DIR = "/etc/nccl-efa-ssh"
# The Secret's keys, mounted as files under SSH_DIR.
CLIENT_KEY = "id_ed25519"
AUTHORIZED_KEYS = "authorized_keys"
HOST_KEY = "ssh_host_ed25519_key"
KNOWN_HOSTS = "known_hosts"
# ssh looks the server's key up under this name, whatever host and port it dials (ssh_config
# HostKeyAlias), so known_hosts holds one line the program writes.
HOST_KEY_ALIAS = "nccl-efa-worker"
# What sshd needs as root beyond nothing (see the module docstring); all allowed at baseline.
SSHD_CAPABILITIES = ["KILL", "SETGID", "SETUID", "SYS_CHROOT"]
SSH_WAIT_SECONDS = 300  # for the second pod: image pull, start, DNS of the headless Service
# A name for the job that leaves room for "-<index>" in its pods' hostnames (a DNS label).
MAX_JOB_NAME_LENGTH = MAX_NAME_LENGTH - 2

# The environment of both pods (the launcher hands it to every rank with mpirun -x).
EFA_ENV = {
    # libfabric: only the efa provider (fabric.7 FI_PROVIDER), so NCCL's network plugin cannot
    # pick tcp or sockets. FI_EFA_USE_DEVICE_RDMA is left unset: unset, libfabric uses RDMA
    # where the device has it (p4d and later) and not elsewhere; 1 would abort on g5/g6e
    # (fi_efa.7). No huge pages: a pod that requested none may not fault them in, and the
    # provider's buffers work without (fi_efa.7 FI_EFA_USE_HUGE_PAGE).
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_HUGE_PAGE": "0",
    # NCCL logs the network it uses ("Using network Libfabric", nccl src/init.cc) and
    # aws-ofi-nccl the provider it selected ("NET/OFI Selected provider is efa, fabric is ...",
    # aws-ofi-nccl v1.16 src/nccl_ofi_net.cpp); the check reads both.
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    # mpi-operator sets this too: keep `<job>-1.<service>` whole, the short name resolves to
    # nothing (orte/runtime/orte_mca_params.c, orte_keep_fqdn_hostnames).
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
}
RANK_ENV = ("PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "NCCL_SOCKET_IFNAME", *EFA_ENV)


@dataclass(frozen=True)
class EfaPair:
    """Two nodes of one EFA pool that run the check together."""

    pool: str
    nodes: tuple[str, str]
    gpu_type: GpuInstanceType

    @property
    def where(self) -> str:
        return f"pool {self.pool} (nodes {self.nodes[0]} and {self.nodes[1]}), stage {STAGE}"


def job_name(pool_resource_name: str) -> str:
    """`<cluster>-<pool>-nccl-efa`, shortened with a hash suffix when it would not fit."""
    return fitted_name(f"{pool_resource_name}-nccl-efa", MAX_JOB_NAME_LENGTH)


def secret_name(job: str) -> str:
    return f"{job}-ssh"


def worker_host(job: str) -> str:
    """The second pod's name in DNS: `<job>-1` under the headless Service `<job>`."""
    return f"{job}-1.{job}"


def ssh_args() -> str:
    """ssh's options, for the launcher's own probe and Open MPI's `plm_rsh_args`: the program's
    key and known_hosts only (`-F /dev/null` ignores the image's ssh_config, which turns host
    key checking off), the server's key required."""
    return (
        f"-F /dev/null -p {SSH_PORT} -i {SSH_DIR}/{CLIENT_KEY} -o IdentitiesOnly=yes "
        f"-o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={SSH_DIR}/{KNOWN_HOSTS} -o HostKeyAlias={HOST_KEY_ALIAS} "
        "-o ConnectTimeout=10"
    )


def sshd_args() -> str:
    """sshd's options (`-f /dev/null`: none of the image's sshd_config)."""
    return (
        f"-f /dev/null -p {SSH_PORT} -h {SSH_DIR}/{HOST_KEY} "
        f"-o AuthorizedKeysFile={SSH_DIR}/{AUTHORIZED_KEYS} -o PermitRootLogin=prohibit-password "
        "-o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o UsePAM=no "
        "-o StrictModes=no"
    )


def secret_string_data(
    client_private: str, client_public: str, host_private: str, host_public: str
) -> dict[str, str]:
    """The Secret both pods mount: the launcher's key and the worker's host key (generated by
    the program), and the line of each that the other side trusts."""
    return {
        CLIENT_KEY: client_private,
        AUTHORIZED_KEYS: client_public,
        HOST_KEY: host_private,
        KNOWN_HOSTS: f"{HOST_KEY_ALIAS} {host_public}",
    }


def two_node_command(pair: EfaPair, *, job: str, ssh_wait_seconds: int = SSH_WAIT_SECONDS) -> str:
    """POSIX sh for both pods. Index 1 serves SSH; index 0 runs all_reduce_perf over both nodes,
    requires that NCCL used aws-ofi-nccl ("Libfabric") with the efa provider, compares the
    average bus bandwidth with the type's EFA floor and fails naming pool, nodes, stage and fix
    (also into the termination message)."""
    gpu_type = pair.gpu_type
    gpus = gpu_type.gpu_count
    floor = gpu_type.nccl_floor.efa
    efa = gpu_type.efa_interfaces
    worker = worker_host(job)
    pods = f"kubectl -n {VALIDATION_NAMESPACE} get pods -l {CHECK_LABEL}={job} -o wide"
    efa_path = (
        f"the pods' {EFA_EXTENDED_RESOURCE} request and the AWS EFA device plugin on both nodes "
        f"(allocatable {EFA_EXTENDED_RESOURCE} must be {efa}), /dev/infiniband in the pods, "
        f"and fi_info -p efa on the nodes"
    )
    ranks = " ".join(f"-x {name}" for name in RANK_ENV)
    return (
        "set -u\n"
        "fail() {\n"
        f"  printf '%s\\n' \"{pair.where}: $1\" >/dev/termination-log\n"
        f"  printf '%s\\n' \"{pair.where}: $1\" >&2\n"
        "  exit 1\n"
        "}\n"
        "serve() {\n"
        f"  {SSHD} -t {sshd_args()} ||\n"
        f'    fail "sshd refuses its configuration (above); look at the Secret '
        f'{secret_name(job)}"\n'
        f'  echo "sshd on port {SSH_PORT}: waiting for mpirun on {job}-0"\n'
        f"  exec {SSHD} -D -e {sshd_args()}\n"
        "}\n"
        "launch() {\n"
        f'  export OMPI_MCA_plm_rsh_args="{ssh_args()}"\n'
        '  tmp="$(mktemp -d)"\n'
        "  waited=0\n"
        "  # shellcheck disable=SC2086 # the options, split into words on purpose\n"
        f'  until ssh $OMPI_MCA_plm_rsh_args {worker} true 2>"$tmp/ssh.err"; do\n'
        f'    if [ "$waited" -ge {ssh_wait_seconds} ]; then\n'
        '      cat "$tmp/ssh.err" >&2\n'
        f'      fail "no SSH login to the second pod {worker} within {ssh_wait_seconds}s '
        f"(ssh's error above); look at that pod ({pods}), the headless Service {job} and "
        f'the pod network between the two nodes"\n'
        "    fi\n"
        "    sleep 5\n"
        "    waited=$((waited + 5))\n"
        "  done\n"
        f'  printf \'%s slots={gpus}\\n\' "$(hostname)" {worker} >"$tmp/hostfile"\n'
        f'  if ! out="$({MPIRUN} --allow-run-as-root --prefix {OPENMPI_PREFIX} '
        f'--hostfile "$tmp/hostfile" -np {2 * gpus} -N {gpus} --bind-to none {ranks} '
        f"{ALL_REDUCE_PERF} -b {MESSAGE_BYTES} -e {MESSAGE_BYTES} -g 1 -c 1 -w 5 -n 20 "
        '2>&1)"; then\n'
        "    printf '%s\\n' \"$out\"\n"
        f'    fail "mpirun of all_reduce_perf across 2 nodes x {gpus} GPUs failed (its output '
        f"is above); look at {efa_path}, and the pool's EFA security group (all traffic to "
        f'and from itself)"\n'
        "  fi\n"
        "  printf '%s\\n' \"$out\"\n"
        "  networks=\"$(printf '%s\\n' \"$out\" | sed -n 's/.*NCCL INFO Using network "
        "\\([A-Za-z]*\\).*/\\1/p' | sort -u | tr '\\n' ' ')\"\n"
        '  networks="${networks% }"\n'
        '  case "$networks" in\n'
        "    Libfabric) ;;\n"
        f'    "") fail "NCCL logged no \'Using network\' line (output above); look at '
        f'NCCL_DEBUG in the pods and the image {ALL_REDUCE_PERF}" ;;\n'
        f'    *) fail "NCCL used network(s) $networks instead of Libfabric only: all_reduce_perf '
        f'did not run over EFA; look at {efa_path}" ;;\n'
        "  esac\n"
        "  if ! printf '%s\\n' \"$out\" | grep -qi 'NET/OFI Selected provider is efa[ ,]'; "
        "then\n"
        f"    fail \"aws-ofi-nccl did not select libfabric's efa provider (no 'NET/OFI "
        f"Selected provider is efa' above); look at {efa_path}\"\n"
        "  fi\n"
        '  busbw="$(printf \'%s\\n\' "$out" | '
        'awk -F: \'/Avg bus bandwidth/ { gsub(/[ \\t]/, "", $2); print $2 }\')"\n'
        '  if [ -z "$busbw" ]; then\n'
        '    fail "all_reduce_perf printed no average bus bandwidth (output above)"\n'
        "  fi\n"
        f'  if ! awk -v got="$busbw" -v floor={floor:g} '
        "'BEGIN { exit !(got + 0 >= floor) }'; then\n"
        f'    fail "bus bandwidth $busbw GB/s over EFA between the two nodes is below the floor '
        f"{floor:g} GB/s of {gpu_type.name} (components/catalog.py NcclFloor.efa); look at "
        f"the EFA interfaces of both nodes (fi_info -p efa must list {efa}), the pool's "
        f"placement group, and GPUDirect RDMA (NCCL's 'via NET/Libfabric' lines above)\"\n"
        "  fi\n"
        f'  echo "{pair.where}: bus bandwidth $busbw GB/s over EFA, floor {floor:g} GB/s"\n'
        "}\n"
        'case "${JOB_COMPLETION_INDEX:-}" in\n'
        "  0) launch ;;\n"
        "  1) serve ;;\n"
        "  *) fail \"JOB_COMPLETION_INDEX is '${JOB_COMPLETION_INDEX:-}', 0 or 1 expected\" ;;\n"
        "esac\n"
    )


def service_spec(job: str) -> dict[str, Any]:
    """The headless Service whose name is the pods' subdomain."""
    return {"clusterIP": "None", "selector": {CHECK_LABEL: job}}


def two_node_job_spec(
    pair: EfaPair,
    *,
    job: str,
    image: str,
    timeout_seconds: int,
    taints: Iterable[Taint],
    shares_per_gpu: int,
    template_annotations: Mapping[str, Any] | None = None,
    ssh_wait_seconds: int = SSH_WAIT_SECONDS,
) -> dict[str, Any]:
    """An Indexed Job of two pods, one on each node of `pair` (node affinity to the two, pod
    anti-affinity between them), each with every GPU share and every EFA interface of its node;
    done when index 0 is done; one retry, bounded by `timeout_seconds` like the other checks."""
    gpus = str(pair.gpu_type.gpu_count * shares_per_gpu)
    efa = str(pair.gpu_type.efa_interfaces)
    labels = {**MANAGED_BY, CHECK_LABEL: job, POOL_LABEL: pair.pool}
    resources = {GPU_EXTENDED_RESOURCE: gpus, EFA_EXTENDED_RESOURCE: efa}
    return {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
        "backoffLimit": 1,
        "activeDeadlineSeconds": timeout_seconds,
        "template": {
            "metadata": {"labels": labels, "annotations": dict(template_annotations or {})},
            "spec": {
                "restartPolicy": "Never",
                "subdomain": job,
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchFields": [
                                        {
                                            "key": "metadata.name",
                                            "operator": "In",
                                            "values": list(pair.nodes),
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {CHECK_LABEL: job}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    },
                },
                "tolerations": [*node_agent_tolerations(taints), UNSCHEDULABLE_TOLERATION],
                "containers": [
                    {
                        "name": CONTAINER,
                        "image": image,
                        "command": [
                            "sh",
                            "-c",
                            two_node_command(pair, job=job, ssh_wait_seconds=ssh_wait_seconds),
                        ],
                        "env": [{"name": k, "value": v} for k, v in EFA_ENV.items()],
                        "ports": [{"name": "ssh", "containerPort": SSH_PORT}],
                        "resources": {"limits": resources, "requests": dict(resources)},
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {
                                "drop": ["ALL"],
                                "add": SSHD_CAPABILITIES,
                            },
                        },
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "volumeMounts": [
                            {"name": "ssh", "mountPath": SSH_DIR, "readOnly": True},
                            {"name": "shm", "mountPath": "/dev/shm"},
                        ],
                    }
                ],
                "volumes": [
                    # 0400: ssh and sshd refuse private keys others may read.
                    {"name": "ssh", "secret": {"secretName": secret_name(job), "defaultMode": 256}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
                ],
            },
        },
    }
