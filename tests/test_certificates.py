"""Credentials that are renewed (issue 40, finding 4): kubeadm's certificates, admin.conf's among
them (the program's Kubernetes provider's credential), live a year and only an upgrade renewed
them. Now `<cluster>-certificates` (renew-certificates.sh) runs once per renewal period of the
program's clock and renews what expires within 90 days, and `<cluster>-kubeconfig` reads
admin.conf again when its expiry changed. The program is played a year later with its clock
injected (components/kube/bootstrap_token.py `clock`, the harness's `clock`); the script runs
in the sandbox against
the kubeadm stub, which answers with kubeadm's structured output (v1alpha3
CertificateExpirationInfo) and its variants (an expired, a missing, an external certificate)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from components.hosts import steps
from components.kube import bootstrap_token, certificates
from tests.helpers.control_plane_host import ADMIN_KUBECONFIG, FAST, PUBLIC_IP
from tests.sandbox import Sandbox, needs_sandbox
from tools import lifecycle
from tools.harness.graph import script_params, unwrap
from tools.harness.stacks import PROGRAM_CLOCK, run_program

RERUN, UNCHANGED, UPDATE = (
    lifecycle.Action.RERUN,
    lifecycle.Action.UNCHANGED,
    lifecycle.Action.UPDATE,
)
DAY = 86400


# ------------------------------------------------------------------ the program, a year later


def _at(days: int):
    """The program's clock `days` after the start of the harness's renewal period."""
    start = certificates.EPOCH + timedelta(
        days=(PROGRAM_CLOCK - certificates.EPOCH).days
        // certificates.CHECK_EVERY_DAYS
        * certificates.CHECK_EVERY_DAYS
    )
    return start + timedelta(days=days, hours=6)


@pytest.fixture(scope="module")
def first_up():
    return run_program("dev", clock=_at(0))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_certificates_are_checked_before_the_kubeconfig_is_read(stack):
    graph = run_program(stack)
    cluster = f"{stack}-gpu"
    check = graph.named(f"{cluster}-{steps.CP_CERTIFICATES.suffix}")
    kubeconfig = graph.named(f"{cluster}-{steps.CP_KUBECONFIG.suffix}")
    assert check.urn in graph.direct_dependencies(kubeconfig), kubeconfig.urn
    params = script_params(check)
    assert params["RENEW_WITHIN_DAYS"] == str(certificates.RENEW_WITHIN_DAYS)
    # An existing cluster's own certificates are its operators': only admin.conf is renewed.
    assert params["RENEW_CONTROL_PLANE"] == ("true" if stack == "dev" else "false"), stack
    assert script_params(kubeconfig)["ADMIN_CERT_NOT_AFTER"].endswith("T00:00:00Z")


def test_a_second_up_in_the_same_period_changes_nothing(first_up):
    again = run_program("dev", clock=_at(certificates.CHECK_EVERY_DAYS - 1), state=first_up)
    plan = lifecycle.plan(first_up, again)
    changed = [c for c in plan.changes if c.action is not UNCHANGED]
    assert not changed, lifecycle.render(plan)


def test_a_year_later_the_up_renews_the_certificates_and_reads_the_kubeconfig_again(first_up):
    later = run_program("dev", clock=_at(365), state=first_up)
    plan = lifecycle.plan(first_up, later)
    check = plan.named(f"dev-gpu-{steps.CP_CERTIFICATES.suffix}")
    kubeconfig = plan.named(f"dev-gpu-{steps.CP_KUBECONFIG.suffix}")
    assert check.action is RERUN and kubeconfig.action is RERUN, lifecycle.render(plan)
    assert plan.named("dev-gpu-k8s").action is UPDATE, "the provider keeps the old credential"
    # Nothing else moves: no node re-runs a step, nothing is replaced.
    others = {
        c.name
        for c in plan.changes
        if c.action is not UNCHANGED and c.name not in {check.name, kubeconfig.name, "dev-gpu-k8s"}
    }
    assert not others, others
    for node, impact in plan.nodes.items():
        assert impact.summary() == "untouched", f"{node}: {impact.summary()}"


def test_every_period_of_a_year_runs_the_check_once():
    periods = {
        certificates.period_start(certificates.CHECK_EVERY_DAYS, _at(day)) for day in range(365)
    }
    assert len(periods) in (12, 13), sorted(periods)
    assert certificates.RENEW_WITHIN_DAYS > 2 * certificates.CHECK_EVERY_DAYS


def test_the_period_is_the_one_the_programs_clock_falls_in(monkeypatch):
    """One program clock: the check's period comes from the clock that dates join tokens
    (bootstrap_token.now), which one run reads once (`__main__.py`), not from a clock of its
    own (the wall clock would name this year's period, not the one 400 days on)."""
    later = _at(400)
    reads: list[int] = []
    program_clock = bootstrap_token.now

    def counted():
        reads.append(1)
        return program_clock()

    monkeypatch.setattr(bootstrap_token, "now", counted)
    graph = run_program("dev", clock=later)
    check = graph.named(f"dev-gpu-{steps.CP_CERTIFICATES.suffix}")
    expected = certificates.period_start(certificates.CHECK_EVERY_DAYS, later)
    assert script_params(check)["CHECK_PERIOD"] == expected
    assert expected != certificates.period_start(certificates.CHECK_EVERY_DAYS, PROGRAM_CLOCK)
    assert len(reads) == 1, f"the program read its clock {len(reads)} times in one run"


@pytest.mark.parametrize(
    "stdout",
    ["", "[certificates] done\n", '{"adminConfNotAfter": "next year"}\n', '{"other": 1}\n'],
)
def test_an_answer_without_admin_confs_expiry_stops_the_run(stdout):
    with pytest.raises((ValueError, KeyError, json.JSONDecodeError)):
        certificates.admin_not_after(stdout)
    line = '{"adminConfNotAfter": "2027-01-01T00:00:00Z"}\n'
    assert certificates.admin_not_after(f"log\n{line}") == "2027-01-01T00:00:00Z"


# ------------------------------------------------------------------ renew-certificates.sh

PARAMS = {
    "CHECK_PERIOD": "2026-12-27",
    "RENEW_WITHIN_DAYS": "90",
    "RENEW_CONTROL_PLANE": "true",
    # The waits' bounds in real seconds (the sleep stub scales only the pauses).
    "API_DOWN_SECONDS": "2",
    "API_UP_SECONDS": "2",
}
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ALL = (
    "admin.conf",
    "apiserver",
    "apiserver-etcd-client",
    "apiserver-kubelet-client",
    "controller-manager.conf",
    "etcd-healthcheck-client",
    "etcd-peer",
    "etcd-server",
    "front-proxy-client",
    "scheduler.conf",
    "super-admin.conf",
)


@pytest.fixture
def control_plane(tmp_path) -> Sandbox:
    """A kubeadm control plane a year old: its certificates expire in `days_left`, its static
    Pods' manifests in place, its API served from the kube-apiserver one (kubectl stub)."""
    sb = Sandbox(tmp_path)
    sb.write("/etc/kubernetes/admin.conf", ADMIN_KUBECONFIG, 0o600)
    for pod in STATIC_PODS:
        sb.write(f"/etc/kubernetes/manifests/{pod}.yaml", f"kind: Pod\nmetadata: {{name: {pod}}}\n")
    sb.state("dpkg/kubeadm", "1.35.1-1.1")
    sb.state("kubectl/api", "v1.35.1")
    sb.state("kubectl/static-pods", "yes")
    sb.state("sleep.scale", "0.001")
    return sb


def _expiring(sb: Sandbox, days: float) -> int:
    at = int(time.time() + days * DAY)
    sb.state("kubeadm/certs.not-after", at)
    return at


def _run(sb: Sandbox, **changes: str):
    return sb.run("renew-certificates.sh", {**PARAMS, **FAST, **changes})


def _renewed(sb: Sandbox) -> list[str]:
    return (sb.state("kubeadm.renewed") or "").split()


def _printed_expiry(result) -> str:
    return json.loads(result.stdout.strip().splitlines()[-1])["adminConfNotAfter"]


@needs_sandbox
def test_nothing_is_renewed_or_restarted_long_before_expiry(control_plane):
    at = _expiring(control_plane, 200)
    result = _run(control_plane)
    assert result.returncode == 0, result.stderr
    assert _renewed(control_plane) == [] and control_plane.state("kubectl/api-down-seen") is None
    assert _printed_expiry(result) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    assert "no certificate expires within 90 days (period 2026-12-27)" in result.stderr


@needs_sandbox
@pytest.mark.parametrize("days_left", [60, -3], ids=["within 90 days", "expired"])
def test_every_certificate_due_is_renewed_and_the_static_pods_restart(control_plane, days_left):
    _expiring(control_plane, days_left)
    result = _run(control_plane)
    assert result.returncode == 0, result.stderr
    assert _renewed(control_plane) == list(ALL)
    # The API server went down (its manifest out) and answers again (its manifest back).
    assert control_plane.state("kubectl/api-down-seen"), result.commands()
    for pod in STATIC_PODS:
        assert control_plane.exists(f"/etc/kubernetes/manifests/{pod}.yaml"), pod
    assert not control_plane.exists(f"/etc/kubernetes/gpu-cluster-restart/{STATIC_PODS[0]}.yaml")
    renewed = _printed_expiry(result)
    assert renewed > time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 300 * DAY))
    # The next period's run finds nothing due.
    again = _run(control_plane, CHECK_PERIOD="2027-01-26")
    assert again.returncode == 0 and _renewed(control_plane) == list(ALL), again.stderr


@needs_sandbox
def test_an_existing_clusters_own_certificates_are_reported_not_renewed(control_plane):
    _expiring(control_plane, 30)
    result = _run(control_plane, RENEW_CONTROL_PLANE="false")
    assert result.returncode == 0, result.stderr
    assert _renewed(control_plane) == ["admin.conf"]
    assert control_plane.state("kubectl/api-down-seen") is None, "restarted an existing cluster"
    assert "WARNING: apiserver expires" in result.stderr, result.stderr


@needs_sandbox
def test_missing_and_external_certificates_are_left_alone(control_plane):
    _expiring(control_plane, 10)
    control_plane.state("kubeadm/certs/super-admin.conf.missing", "yes")
    control_plane.state("kubeadm/certs/front-proxy-client.external", "yes")
    result = _run(control_plane)
    assert result.returncode == 0, result.stderr
    assert "super-admin.conf" not in _renewed(control_plane)
    assert "front-proxy-client" not in _renewed(control_plane)
    assert "front-proxy-client is managed outside kubeadm; not renewed here" in result.stderr


@needs_sandbox
def test_a_run_cut_off_with_the_manifests_aside_puts_them_back_first(control_plane):
    _expiring(control_plane, 200)
    control_plane.write(
        "/etc/kubernetes/gpu-cluster-restart/kube-apiserver.yaml",
        control_plane.read("/etc/kubernetes/manifests/kube-apiserver.yaml"),
    )
    control_plane.write("/etc/kubernetes/manifests/kube-apiserver.yaml", "")
    (control_plane.host_path("/etc/kubernetes/manifests/kube-apiserver.yaml")).unlink()
    result = _run(control_plane)
    assert result.returncode == 0, result.stderr
    assert "moved aside by a run that was cut off" in result.stderr
    assert control_plane.exists("/etc/kubernetes/manifests/kube-apiserver.yaml")


@needs_sandbox
@pytest.mark.parametrize(
    ("setup", "says"),
    [
        ({"CHECK_PERIOD": "soon"}, "CHECK_PERIOD must be a date (YYYY-MM-DD), got 'soon'"),
        ({"RENEW_WITHIN_DAYS": "0"}, "RENEW_WITHIN_DAYS must be a number of days (1-999)"),
        ({"RENEW_CONTROL_PLANE": "yes"}, "RENEW_CONTROL_PLANE must be true or false, got 'yes'"),
        ("kubeadm.fail.certs", "kubeadm certs check-expiration failed (its error is above)"),
        ("kubeadm.fail.certs-renew", "kubeadm certs renew admin.conf failed"),
        ("admin-missing", "admin.conf holds no certificate kubeadm can read"),
        # The kubelet does not stop the API server (not running): the manifests go back.
        ("kubelet-down", "the API server still answered 2s after its manifest left"),
        # The API server does not come back with the renewed certificates.
        ("never-ready", "the API server did not answer /readyz within 2s after its restart"),
    ],
)
def test_the_renewal_stops_naming_what_failed(control_plane, setup, says):
    _expiring(control_plane, 10)
    params: dict[str, str] = {}
    if isinstance(setup, dict):
        params = setup
    elif setup == "admin-missing":
        control_plane.state("kubeadm/certs/admin.conf.missing", "yes")
    elif setup == "kubelet-down":
        (control_plane.state_dir / "kubectl" / "static-pods").unlink()
    elif setup == "never-ready":
        control_plane.state("kubectl/ready-at", int(time.time() + 10 * DAY))
    else:
        control_plane.state(setup, 1)
    result = _run(control_plane, **params)
    assert result.returncode != 0, result.stdout
    assert says in result.stderr, result.stderr
    assert "adminConfNotAfter" not in result.stdout
    for pod in STATIC_PODS:
        assert control_plane.exists(f"/etc/kubernetes/manifests/{pod}.yaml"), f"{pod} left aside"


@needs_sandbox
def test_read_kubeconfig_takes_the_expiry_it_was_run_for(control_plane, ca_cert):
    control_plane.write("/etc/kubernetes/pki/ca.crt", ca_cert)
    server = f"https://{PUBLIC_IP}:6443"
    result = control_plane.run(
        "read-kubeconfig.sh", {"API_SERVER": server, "ADMIN_CERT_NOT_AFTER": "2027-12-27T00:00:00Z"}
    )
    assert result.returncode == 0, result.stderr
    assert "valid until 2027-12-27T00:00:00Z" in result.stderr
    refused = control_plane.run(
        "read-kubeconfig.sh", {"API_SERVER": server, "ADMIN_CERT_NOT_AFTER": "$(date)"}
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert "ADMIN_CERT_NOT_AFTER must be a UTC time (RFC 3339), got '$(date)'" in refused.stderr


def test_the_provider_follows_the_kubeconfig_the_step_read(first_up):
    provider = first_up.named("dev-gpu-k8s")
    kubeconfig = first_up.named(f"dev-gpu-{steps.CP_KUBECONFIG.suffix}")
    assert kubeconfig.urn in provider.dependencies
    assert "kubeconfig" in unwrap(provider.inputs)
