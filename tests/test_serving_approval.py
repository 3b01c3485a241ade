"""A node's kubelet serving certificate is approved where the node is put in service, through the
API, only for the names the program knows its machine by (issue 41, finding 3;
components/kube/api/certificates.py, node_hooks.py `put_in_service`). Requests are made as a
kubelet files them (tests/helpers/csr.py, with `cryptography`) and served by the fake API server
(tests/helpers/fake_kube_api.py); the hostile ones are the catalog the control plane's bash
approver is held to (tests/test_control_plane_scripts.py), so the two approvers agree."""

from __future__ import annotations

import pytest

from components.kube import kubelet_serving, node_hooks
from components.kube.api import certificates
from components.labels import UNPROVEN_TAINT_KEY
from tests.helpers import csr
from tests.helpers.fake_kube_api import FakeApiServer, FakeClock, run_async
from tools.harness.graph import unwrap
from tools.harness.mocks import fake_ip
from tools.harness.stacks import run_program

MACHINE = "i-0a1b2c3d4e5f60718"
NODE = "dev-gpu-a10g-0"
OTHER = "dev-gpu-a10g-1"
NODE_DNS = "ip-10-42-9-9.us-west-2.compute.internal"
NODE_IP = "10.42.9.9"
API_IP = "10.42.3.7"
NAMES = csr.serving_names(NODE, NODE_DNS, NODE_IP)
HOSTILE = csr.hostile_requests(NODE, NODE_IP, API_IP)
APPROVAL = f"{certificates.CSR_PATH}/{{}}/approval"


def environment(names: str = NAMES, record: str = "true") -> dict[str, str]:
    """`<node>-in-service`'s environment, as components/node_inputs.py writes it."""
    return {
        "NODE_NAME": NODE,
        "INSTANCE_ID": MACHINE,
        "NODE_LABELS": f"gpu-cluster.io/instance-id={MACHINE},gpu-cluster.io/pool=a10g",
        "NODE_TAINTS": "nvidia.com/gpu=true:NoSchedule",
        "CHANGE": "c1",
        "POOL_NAME": "a10g",
        "MAX_UNAVAILABLE": "1",
        "READY_TIMEOUT_SECONDS": "600",
        "SERVING_NAMES": names,
        "RECORD_SERVING_NAMES": record,
    }


@pytest.fixture
def api():
    with FakeApiServer() as server:
        server.cluster.add_node(
            NODE,
            machine=MACHINE,
            spec={"taints": [{"key": UNPROVEN_TAINT_KEY, "effect": "NoSchedule"}]},
        )
        yield server


def put_in_service(
    server: FakeApiServer, names: str = NAMES, record: str = "true"
) -> tuple[list[str], FakeClock]:
    """The in-service hook's work, as the engine runs it before `<node>-in-service`."""
    lines: list[str] = []
    clock = FakeClock()
    client = run_async(access_of(server).api())
    inputs = node_hooks.InServiceInputs.of(environment(names, record))
    run_async(node_hooks.put_in_service(client, inputs, clock, lines.append))
    return lines, clock


def unproven(server: FakeApiServer) -> list[dict]:
    taints = server.cluster.nodes[NODE]["spec"].get("taints") or []
    return [t for t in taints if t["key"] == UNPROVEN_TAINT_KEY]


def approved(server: FakeApiServer) -> list[str]:
    return [
        name
        for name, obj in server.cluster.csrs.items()
        if any(c["type"] == "Approved" for c in obj["status"].get("conditions") or ())
    ]


def test_the_nodes_own_request_is_approved_when_it_is_put_in_service(api):
    own = csr.kubelet_request(NODE, NAMES)
    api.cluster.add_csr("csr-own", NODE, own)
    api.cluster.add_csr("csr-other", OTHER, csr.request(OTHER, dns=[OTHER]))
    api.cluster.add_csr(
        "csr-client", NODE, own, signer="kubernetes.io/kube-apiserver-client-kubelet"
    )
    lines, _clock = put_in_service(api)
    assert approved(api) == ["csr-own"], lines
    condition = api.cluster.csrs["csr-own"]["status"]["conditions"][0]
    assert condition["status"] == "True" and condition["reason"] == certificates.APPROVAL_REASON
    # Through the approval subresource, as kubectl certificate approve writes it.
    assert ("PUT", APPROVAL.format("csr-own")) in api.cluster.requests, api.cluster.requests
    assert "approved kubelet serving certificate request csr-own" in lines
    # And the node is in service (the approval comes first, then the one write).
    assert not unproven(api)


def test_a_request_for_some_of_its_names_and_an_rsa_keys_usages_is_its_own(api):
    rsa = ["digital signature", "key encipherment", "server auth"]
    api.cluster.add_csr("csr-own", NODE, csr.request(NODE, dns=[NODE], ips=[NODE_IP]), usages=rsa)
    put_in_service(api)
    assert approved(api) == ["csr-own"]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_request_for_names_not_the_nodes_stays_pending_and_says_why(api, case):
    """kubernetes.default.svc, the API's address, another node's name or address, an e-mail
    name, another subject, client usages, not a request at all: refused, the node still goes
    into service, and the step's log says which request and why."""
    request, usages = HOSTILE[case]
    api.cluster.add_csr("csr-hostile", NODE, request, usages=usages)
    lines, _clock = put_in_service(api)
    assert approved(api) == [], f"{case}: approved"
    assert not [r for r in api.cluster.requests if r[1].endswith("/approval")], case
    said = [line for line in lines if "not approving" in line]
    assert len(said) == 1 and "csr-hostile" in said[0] and "stays pending" in said[0], lines
    assert not unproven(api), "the node still goes into service"


def test_a_name_not_in_the_set_is_refused_naming_it(api):
    api.cluster.add_csr(
        "csr-api", NODE, csr.request(NODE, dns=[NODE, "kubernetes.default.svc"], ips=[NODE_IP])
    )
    lines, _clock = put_in_service(api)
    assert approved(api) == []
    assert any("it names DNS:'kubernetes.default.svc'" in line for line in lines), lines


def test_a_request_decided_before_is_left_as_it_is(api):
    own = csr.kubelet_request(NODE, NAMES)
    api.cluster.add_csr("csr-old", NODE, own, conditions=[{"type": "Denied", "status": "True"}])
    put_in_service(api)
    assert approved(api) == []
    assert not [r for r in api.cluster.requests if r[1].endswith("/approval")]


def test_without_a_request_it_looks_a_bounded_while_then_says_how_to_approve_later(api):
    lines, clock = put_in_service(api)
    lists = [r for r in api.cluster.requests if r == ("GET", certificates.CSR_PATH)]
    waits = node_hooks.CSR_WAIT_SECONDS // certificates.POLL_SECONDS
    assert len(lists) == waits + 1, lists
    assert clock.seconds == node_hooks.CSR_WAIT_SECONDS
    assert any("kubectl certificate approve <name>" in line for line in lines), lines


def test_an_approval_another_approver_wrote_first_is_taken_as_done(api):
    """The managed control plane's timer approves too: a stale approval is 409, read again."""
    own = csr.kubelet_request(NODE, NAMES)
    api.cluster.add_csr("csr-own", NODE, own)

    def timer(method: str, path: str) -> None:
        if path.endswith("/approval"):
            obj = api.cluster.csrs["csr-own"]
            obj["status"]["conditions"] = [{"type": "Approved", "status": "True"}]
            api.cluster.stamp(obj)

    api.cluster.race = timer
    lines, _clock = put_in_service(api)
    assert approved(api) == ["csr-own"]
    assert "approved kubelet serving certificate request csr-own" not in lines


# ---------------------------------------------------------------- the names the program knows


RECORD = f"{certificates.RECORD_PREFIX}{NODE}"


def test_the_names_are_recorded_for_the_managed_control_planes_approver(api):
    """The timer of init-control-plane.sh reads kube-system/gpu-cluster-serving-<node> for a
    renewal; the put in service writes it (and rewrites it for a new machine's names)."""
    put_in_service(api)
    assert api.cluster.config_maps[RECORD]["data"] == {certificates.RECORD_KEY: NAMES}
    newer = csr.serving_names(NODE, "ip-10-42-9-10.us-west-2.compute.internal", "10.42.9.10")
    put_in_service(api, newer)
    assert api.cluster.config_maps[RECORD]["data"] == {certificates.RECORD_KEY: newer}
    writes = [r for r in api.cluster.requests if "configmaps" in r[1] and r[0] != "GET"]
    assert [w[0] for w in writes] == ["POST", "PUT"], writes
    put_in_service(api, newer)
    writes = [r for r in api.cluster.requests if "configmaps" in r[1] and r[0] != "GET"]
    assert len(writes) == 2, "the same names are not written again"


def test_an_existing_control_plane_gets_no_record(api):
    put_in_service(api, record="false")
    assert not api.cluster.config_maps


def test_the_record_goes_when_the_node_leaves(api):
    put_in_service(api)
    run_async(node_hooks.leave(run_async(access_of(api).api()), NODE, MACHINE, FakeClock(), print))
    assert NODE not in api.cluster.nodes and not api.cluster.config_maps
    # A Node deleted by hand: its record still goes; then nothing is left to find or fail.
    api.cluster.add_node(NODE, machine=MACHINE)
    put_in_service(api)
    del api.cluster.nodes[NODE]
    for _ in range(2):
        run_async(
            node_hooks.leave(run_async(access_of(api).api()), NODE, MACHINE, FakeClock(), print)
        )
        assert not api.cluster.config_maps


def access_of(server: FakeApiServer) -> node_hooks.ClusterAccess:
    return node_hooks.ClusterAccess(kubeconfig=server.kubeconfig(), clock=FakeClock())


def test_each_launched_node_carries_the_names_its_instance_has(dev_graph):
    rows = [r for r in dev_graph if r.name.endswith("-in-service")]
    assert rows, "the dev stack has nodes"
    for resource in rows:
        env = unwrap(resource.inputs["environment"])
        node = env["NODE_NAME"]
        # What the mocks answer for the instance `node` (tools/harness/mocks.py new_resource).
        dns = f"ip-{fake_ip('10-42', node).replace('.', '-')}.ec2.internal"
        names = env["SERVING_NAMES"].splitlines()
        assert names == [f"DNS:{node}", f"DNS:{dns}", f"IP Address:{fake_ip('10.42', node)}"], (
            resource.urn
        )


def test_an_existing_hosts_names_are_its_node_and_its_configured_address():
    assert kubelet_serving.host_serving_names("c-p-gpu01", "10.8.0.21") == (
        "DNS:c-p-gpu01\nIP Address:10.8.0.21"
    )
    assert kubelet_serving.host_serving_names("c-p-gpu01", "GPU01.lab.example") == (
        "DNS:c-p-gpu01\nDNS:gpu01.lab.example"
    )
    known = certificates.known_names(kubelet_serving.host_serving_names("n", "fd00::21"))
    assert known == {("DNS", "n"), ("IP", "fd00::21")}


@pytest.fixture(scope="module")
def dev_graph():
    return run_program("dev")


def test_a_request_cut_anywhere_is_refused_never_a_traceback():
    """Each prefix of a good request's DER (and a body of base64 that is no DER at all) gives a
    problem, not an exception: the hook must say why, whatever a node files."""
    import base64

    pem = base64.b64decode(csr.kubelet_request(NODE, NAMES)).decode()
    der = base64.b64decode("".join(pem.strip().splitlines()[1:-1]))
    known = certificates.known_names(NAMES)
    for end in range(len(der)):
        body = base64.b64encode(der[:end]).decode()
        text = f"-----BEGIN CERTIFICATE REQUEST-----\n{body}\n-----END CERTIFICATE REQUEST-----\n"
        spec = {"usages": csr.USAGES, "request": base64.b64encode(text.encode()).decode()}
        assert certificates.serving_problem({"spec": spec}, NODE, known), end
    whole = {"usages": csr.USAGES, "request": csr.kubelet_request(NODE, NAMES)}
    assert certificates.serving_problem({"spec": whole}, NODE, known) == ""
