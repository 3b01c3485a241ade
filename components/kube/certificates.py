"""The certificates kubeadm made on the control plane, admin.conf's among them (the credential the
program's Kubernetes provider uses): each lives a year, and only a `kubeadm upgrade` renews them
on its own. `<cluster>-certificates` checks them once per renewal period of the program's clock
and renews those that expire within RENEW_WITHIN_DAYS; the kubeconfig step reads admin.conf
again when its expiry changed. Why: docs/decisions/065-credentials-renewed-before-they-expire.md
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

# kubeadm's certificates live a year (ClusterConfiguration certificateValidityPeriod, 8760h).
# Checked every CHECK_EVERY_DAYS, renewed within RENEW_WITHIN_DAYS of expiry: an `up` once a
# period renews every certificate with at least RENEW_WITHIN_DAYS - CHECK_EVERY_DAYS to spare.
RENEW_WITHIN_DAYS = 90
CHECK_EVERY_DAYS = 30
# Periods are counted from this instant (a Monday, 00:00 UTC): the same on every machine.
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
# A static Pod stops and starts again when its manifest leaves and returns: the kubelet reads
# the manifest directory every 20 s (KubeletConfiguration `fileCheckFrequency`), so six reads
# to stop, and kube-apiserver's start on a loaded control plane within five minutes.
API_DOWN_SECONDS = 120
API_UP_SECONDS = 300
POLL_SECONDS = 5


def period_start(days: int, at: datetime) -> str:
    """The first day (YYYY-MM-DD) of the `days`-long period, counted from EPOCH, that holds `at`:
    it changes once every `days` days, so a second `up` soon after changes nothing."""
    elapsed = at - EPOCH
    return (EPOCH + timedelta(days=days * (elapsed.days // days))).date().isoformat()


def renewal_params(run_at: datetime, *, manages_control_plane: bool) -> dict[str, str]:
    """renew-certificates.sh's parameters this run: the period `run_at` (the program's clock,
    components/kube/bootstrap_token.py `now`, read once per run) falls in (a new one re-runs the
    step), the renewal window, and whether the control plane is the stack's (an existing
    cluster's own certificates are its operators': only admin.conf is renewed)."""
    return {
        "CHECK_PERIOD": period_start(CHECK_EVERY_DAYS, run_at),
        "RENEW_WITHIN_DAYS": str(RENEW_WITHIN_DAYS),
        "RENEW_CONTROL_PLANE": "true" if manages_control_plane else "false",
        "API_DOWN_SECONDS": str(API_DOWN_SECONDS),
        "API_UP_SECONDS": str(API_UP_SECONDS),
        "POLL_SECONDS": str(POLL_SECONDS),
    }


def admin_not_after(stdout: str) -> str:
    """admin.conf's client certificate's expiry as renew-certificates.sh prints it last (one
    JSON line, `{"adminConfNotAfter": "<RFC 3339>"}`)."""
    lines = [line for line in (stdout or "").splitlines() if line.strip()]
    if not lines:
        raise ValueError("renew-certificates.sh printed nothing")
    expiry = json.loads(lines[-1])["adminConfNotAfter"]
    datetime.fromisoformat(expiry.replace("Z", "+00:00"))  # refuses anything but a time
    return expiry
