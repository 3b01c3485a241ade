"""Join tokens (docs/decisions/057-a-join-token-is-minted-when-a-node-must-join.md): minted by
the program when a node must join, living JOIN_TOKEN_TTL from the program's clock (issue 41,
finding 8), under a seed of their own, and remembered in the state so that a second `up` and a
refresh change nothing (issue 40, finding 6).

The SDK's mock monitor records a hook binding but never calls the hook: the binding is checked
on the registered graph, and the hook's callback is called directly against
tests/helpers/fake_kube_api.py, a fake kube-apiserver over real TLS with the authenticator's and
the token cleaner's rules."""

from __future__ import annotations

import asyncio
import base64
import datetime
import re

import pulumi
import pytest

from components.hosts import steps
from components.kube import bootstrap_token
from components.kube.api.client import (
    ApiError,
    AsyncKubeApi,
    KubeApi,
    KubeconfigError,
    credential_of,
)
from components.kube.bootstrap_token import JOIN_TOKEN_TTL, JoinTokenError
from components.kube.node_hooks import ClusterAccess
from tests.helpers import graphs as shared
from tests.helpers.fake_kube_api import FakeApiServer, make_pki, run_async, secret_data
from tests.helpers.manifests import stack_minor, validate
from tools import drift, lifecycle, recovery
from tools.harness import deployed, mocks, stacks
from tools.harness.graph import Graph, Resource, Secret, script_params, unwrap
from tools.harness.identity import VARIANTS
from tools.harness.stacks import PROGRAM_CLOCK, ROOT, STACKS, TEST_SECRETS, run_program
from tools.lifecycle import Action

STASH = "pulumi:index:Stash"
SEED = "pulumi:index:Stash"
T0 = PROGRAM_CLOCK
HOUR = datetime.timedelta(hours=1)


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    return {stack: shared.stack_graph(stack) for stack in STACKS}


def node_names(graph: Graph) -> list[str]:
    return lifecycle.node_names(graph)


def record_of(graph: Graph, node_name: str) -> Resource:
    return graph.named(steps.JOIN_TOKEN.resource_name(node_name))


def join_token_of(graph: Graph, node_name: str) -> str:
    return script_params(graph.named(steps.JOIN.resource_name(node_name)))["JOIN_TOKEN"]


def as_state(graph: Graph) -> list[dict]:
    """The graph as `pulumi stack export` lists resources (type, URN, inputs)."""
    return [{"urn": r.urn, "type": r.type, "inputs": unwrap(r.inputs)} for r in graph]


def fields(graph: Graph, node_name: str) -> dict:
    return unwrap(record_of(graph, node_name).inputs["input"])


# ---------------------------------------------------------------- the registered record


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_has_a_token_record_its_own_hook_mints(graphs, stack):
    """A Stash per node, bound to its `before_create` hook; replaced with its machine or its
    cluster (the join's identity), its input carried from the state; the join takes the token
    it holds, after it; the token secret is a secret input."""
    graph = graphs[stack]
    endpoint = graph.outputs["endpoint"]
    ids = set()
    for name in node_names(graph):
        record = record_of(graph, name)
        assert record.type == STASH, f"{record.urn}: {record.type}"
        assert record.hooks == {"before_create": [f"{record.name}-mint"]}, record.urn
        assert record.ignore_changes == ["input"], record.urn
        machine = graph.named(name).id
        assert unwrap(record.replacement_trigger) == [machine, endpoint, mocks.CA_CERT_HASH]
        held = record.inputs["input"]
        assert isinstance(held["tokenSecret"], Secret), f"{record.urn}: token secret in plain"
        data = unwrap(held)
        assert data["node"] == name and data["machine"] == machine, record.urn
        assert data["registeredAt"] == "2026-01-01T00:00:00Z", record.urn
        assert re.fullmatch(r"[a-z0-9]{6}", data["tokenId"]), record.urn
        assert re.fullmatch(r"[a-z0-9]{16}", data["tokenSecret"]), record.urn
        assert join_token_of(graph, name) == f"{data['tokenId']}.{data['tokenSecret']}"
        join = graph.named(steps.JOIN.resource_name(name))
        assert record.urn in graph.direct_dependencies(join), f"{join.urn}: before its token"
        kube_tools = graph.named(steps.KUBE_TOOLS.resource_name(name))
        assert graph.depends_on(record, kube_tools), f"{record.urn}: before the kube tools"
        ids.add(data["tokenId"])
    assert len(ids) == len(node_names(graph)), f"{stack}: nodes share a token"


def test_the_token_needs_no_ssh_key_but_a_seed_of_its_own(graphs):
    """Another sshPrivateKey (or none, once SSH goes through an agent) gives the same token;
    the pool's seed is a Stash of a fresh secret, a secret of the state only."""
    other = mocks.ed25519_key("another operator login")["privateKeyOpenssh"]
    assert other != TEST_SECRETS["sshPrivateKey"]
    again = run_program("dev", secrets={"sshPrivateKey": other})
    for name in node_names(again):
        assert join_token_of(again, name) == join_token_of(graphs["dev"], name), name
        assert record_of(again, name).inputs == record_of(graphs["dev"], name).inputs, name
    seeds = [r for r in graphs["dev"].of_type(SEED) if r.name.endswith("-join-token-seed")]
    assert [s.name for s in seeds] == ["dev-gpu-a10g-join-token-seed"], seeds
    assert "input" in seeds[0].ignore_changes, seeds[0].urn
    assert isinstance(seeds[0].inputs["input"], Secret), "a secret in the state"
    held = bootstrap_token.derive
    parts = {"node": "n", "machine": "i-0a", "cluster": "10.0.0.1:6443/sha256:ab"}
    token = held("seed", registered_at="2026-01-01T00:00:00Z", **parts)
    assert held("other seed", registered_at="2026-01-01T00:00:00Z", **parts) != token
    for key in parts:
        changed = {**parts, key: parts[key] + "x"}
        assert held("seed", registered_at="2026-01-01T00:00:00Z", **changed) != token, key
    assert held("seed", registered_at="2026-01-01T00:00:01Z", **parts) != token


def test_the_seed_is_made_once_and_kept_by_every_later_run(graphs, monkeypatch):
    """Each run of the program makes a fresh secret for the seed; only the first is stored. The
    engine keeps a Stash's `output` on update and its input is ignored (components/kube/
    bootstrap_token.py `seed` cites builtins.go), so a later run, with another fresh secret,
    changes nothing: the seed, the token records and the joins stay as they are."""
    monkeypatch.setattr(stacks, "mock_secret", lambda name: f"another run's secret for {name}")
    later = run_program("dev", state=graphs["dev"])
    plan = lifecycle.plan(graphs["dev"], later)
    [seed] = [c for c in plan.changes if c.name.endswith("-join-token-seed")]
    assert seed.action is Action.UNCHANGED, seed
    moved = [(c.name, c.action) for c in plan.changes if c.action is not Action.UNCHANGED]
    assert moved == [], moved
    for name in node_names(later):
        assert join_token_of(later, name) == join_token_of(graphs["dev"], name), name


# ---------------------------------------------------------------- finding 8: whose clock


def test_the_nodes_clock_sets_nothing(graphs, monkeypatch):
    """Issue 41, finding 8: a node that reports a far-future time (what install-kube-tools.sh
    of earlier releases printed, and the program then read) changes no token and no join."""
    monkeypatch.setattr(mocks, "READY_TO_JOIN_AT", "2099-12-31T23:59:59Z")
    lying = run_program("dev")
    for name in node_names(lying):
        assert record_of(lying, name).inputs == record_of(graphs["dev"], name).inputs, name
        assert join_token_of(lying, name) == join_token_of(graphs["dev"], name), name


def _record(token_id: str = "abcdef", secret: str = "0123456789abcdef") -> dict:
    return {
        "node": "dev-gpu-a10g-0",
        "machine": "i-0123456789abcdef0",
        "registeredAt": "2026-01-01T00:00:00Z",
        "tokenId": token_id,
        "tokenSecret": secret,
    }


def _mint(api: FakeApiServer, at: datetime.datetime, record: dict | None = None):
    client = AsyncKubeApi(KubeApi(credential_of(api.kubeconfig())))
    return run_async(bootstrap_token.mint(record or _record(), client, lambda: at))


def test_a_token_lives_two_hours_from_the_programs_clock():
    """What the mint writes: the program's clock plus two hours, which the authenticator and
    the token cleaner then go by."""
    with FakeApiServer() as api:
        api.cluster.server_now = T0
        minted = _mint(api, T0)
        assert minted.expires == T0 + JOIN_TOKEN_TTL, minted
        (secret,) = api.cluster.secrets.values()
        assert secret_data(secret, "expiration") == "2026-01-01T02:00:00Z", secret
        token = "abcdef.0123456789abcdef"
        assert api.cluster.authenticates(token, T0 + JOIN_TOKEN_TTL), "refused within its lifetime"
        assert not api.cluster.authenticates(
            token, T0 + JOIN_TOKEN_TTL + datetime.timedelta(seconds=1)
        )
        assert api.cluster.clean(T0 + JOIN_TOKEN_TTL + datetime.timedelta(seconds=1)) == [
            "bootstrap-token-abcdef"
        ]


def test_a_runner_clock_ahead_is_clamped_to_the_api_servers():
    """A clock far ahead (a wrong runner, or a value meant to keep a token alive) gives no
    longer life: never more than two hours past the cluster's own clock."""
    with FakeApiServer() as api:
        api.cluster.server_now = T0
        minted = _mint(api, T0 + datetime.timedelta(days=3650))
        assert minted.expires == T0 + JOIN_TOKEN_TTL, minted
        assert not api.cluster.authenticates("abcdef.0123456789abcdef", T0 + 3 * HOUR)


def test_a_runner_clock_far_behind_is_refused_before_anything_is_written():
    with FakeApiServer() as api:
        api.cluster.server_now = T0
        assert _mint(api, T0 - HOUR).expires == T0 + HOUR  # shorter, still enough for a join
        api.cluster.secrets.clear()
        with pytest.raises(JoinTokenError, match=r"1:45:00 behind the API server's.*NTP"):
            _mint(api, T0 - datetime.timedelta(minutes=105))
        assert not api.cluster.secrets


def test_without_a_server_date_the_programs_clock_alone_sets_it():
    assert bootstrap_token.expiration(T0, None) == T0 + JOIN_TOKEN_TTL


# ---------------------------------------------------------------- the mint, through the API


def _hook_args(graph: Graph, name: str) -> pulumi.ResourceHookArgs:
    """What the engine hands the hook before it creates the record: its inputs, secrets as
    Outputs (pulumi runtime/_callbacks.py `outputtify_secrets`)."""
    record = record_of(graph, name)
    held = dict(unwrap(record.inputs["input"]))
    held["tokenSecret"] = pulumi.Output.secret(held["tokenSecret"])
    return pulumi.ResourceHookArgs(
        urn=record.urn, id="", name=record.name, type=STASH, new_inputs={"input": held}
    )


def test_the_hook_mints_the_token_the_join_uses(graphs):
    graph = graphs["dev"]
    name = node_names(graph)[0]
    with FakeApiServer() as api, bootstrap_token.clock(lambda: T0):
        api.cluster.server_now = T0

        async def run() -> None:
            access = ClusterAccess(kubeconfig=pulumi.Output.secret(api.kubeconfig()))
            await bootstrap_token.mint_callback(access)(_hook_args(graph, name))

        loop = asyncio.new_event_loop()  # the program runs' own loop stays as it is
        try:
            loop.run_until_complete(run())
        finally:
            loop.close()
        (secret,) = api.cluster.secrets.values()
        assert api.cluster.authenticates(join_token_of(graph, name), T0 + HOUR), secret
        assert secret["metadata"]["namespace"] == "kube-system", secret
        assert {key: secret_data(secret, key) for key in secret["data"]} == {
            "token-id": fields(graph, name)["tokenId"],
            "token-secret": fields(graph, name)["tokenSecret"],
            "expiration": "2026-01-01T02:00:00Z",
            "description": f"gpu-cluster: join of {name}",
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        }
        body = api.cluster.posts()[0]
        validate(body, stack_minor("dev"), "the join token Secret")


def test_a_node_its_machine_registered_gets_no_token():
    with FakeApiServer() as api:
        api.cluster.server_now = T0
        record = _record()
        api.cluster.add_node(record["node"], machine=record["machine"])
        minted = _mint(api, T0)
        assert minted.expires is None and not api.cluster.posts(), minted
        # Registered before nodes carried their instance id (before this record): taken as
        # this machine's.
        api.cluster.add_node(record["node"], machine=None, created="2025-12-01T00:00:00Z")
        assert _mint(api, T0).expires is None and not api.cluster.posts()
        # The same since the record (a kubelet that set no providerID, as a join token's
        # certificate of any name could register): another machine's, so the token is minted.
        api.cluster.add_node(record["node"], machine=None, created="2026-01-01T00:10:00Z")
        assert _mint(api, T0).expires is not None and len(api.cluster.posts()) == 1
        api.cluster.secrets.clear()
        api.cluster.bodies.clear()
        # Another machine's Node (the one this machine replaces, not drained yet): mint.
        api.cluster.add_node(record["node"], machine="i-0fedcba987654321f")
        assert _mint(api, T0).expires is not None and len(api.cluster.posts()) == 1


def test_a_mint_cut_short_is_finished_by_the_next_run_and_a_foreign_secret_is_refused():
    with FakeApiServer() as api:
        api.cluster.server_now = T0
        _mint(api, T0)
        again = _mint(api, T0 + HOUR)  # the same record: its Secret is there (409)
        assert "earlier run" in again.summary and len(api.cluster.secrets) == 1, again
        with pytest.raises(JoinTokenError) as refused:
            _mint(api, T0, _record(secret="ffffffffffffffff"))
        message = str(refused.value)
        assert "kubectl -n kube-system delete secret bootstrap-token-abcdef" in message, message
        assert "ffffffffffffffff" not in message and "0123456789abcdef" not in message, message


def test_refusals_name_the_node_and_never_the_token():
    with FakeApiServer() as api:
        api.cluster.forbidden = True
        with pytest.raises(JoinTokenError, match=r"^dev-gpu-a10g-0: cannot read its Node") as e:
            _mint(api, T0)
        assert "0123456789abcdef" not in str(e.value)
        other = KubeApi(credential_of(api.kubeconfig(pki=make_pki("another-cluster"))))
        with pytest.raises(ApiError, match="TLS failed"):
            other.call("GET", "/api/v1/nodes/x")
    with pytest.raises(KubeconfigError, match=r"the kubeconfig has no context named None"):
        credential_of("apiVersion: v1\nkind: Config\n")


# ---------------------------------------------------------------- day two


def test_a_second_up_with_the_clock_moved_changes_nothing(graphs):
    """Issue 41: the program's clock reads differently on every run; what a record holds comes
    from the state, so a later `up` of the same program plans nothing. Later: past every
    token's lifetime, within the certificates' check period (a new period re-runs that step by
    design, decision 065)."""
    from components.kube import certificates

    at = T0 + JOIN_TOKEN_TTL + HOUR
    period = certificates.CHECK_EVERY_DAYS
    assert certificates.period_start(period, at) == certificates.period_start(period, T0)
    later = run_program("dev", clock=at, state=graphs["dev"])
    plan = lifecycle.plan(graphs["dev"], later)
    assert plan.counts() == {"unchanged": len(later)}, lifecycle.render(plan)
    for name in node_names(later):
        assert join_token_of(later, name) == join_token_of(graphs["dev"], name), name


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_refresh_after_the_tokens_expired_changes_nothing(graphs, stack):
    """Issue 40, finding 6: three hours on, the token cleaner has deleted every token; a
    refresh then drops from the state whatever the cluster deleted, and the next `up` plans
    nothing: no token is created again, for any node."""
    at = T0 + 3 * HOUR
    state = graphs[stack]
    kept_urns = {r["urn"] for r in drift.refreshed(as_state(state), at)}
    refreshed = Graph([r for r in state if r.urn in kept_urns], state.outputs)
    after = run_program(stack, clock=at, state=refreshed)
    plan = lifecycle.plan(refreshed, after)
    assert plan.counts() == {"unchanged": len(after)}, lifecycle.render(plan)
    # Nor does the drift check leave out anything but one-shot image builders.
    left_out = drift.excluded(as_state(state), at)
    assert [urn for urn in left_out if not urn.endswith("-builder")] == [], left_out


@pytest.mark.parametrize("pinned", [*STACKS, *VARIANTS])
def test_the_program_registers_nothing_the_cluster_deletes_or_rewrites(pinned):
    stack, config = VARIANTS.get(pinned, (pinned, None))
    far = T0 + datetime.timedelta(days=3650)
    graph = run_program(stack, config=config)
    states = zip(graph, as_state(graph), strict=True)
    owned = {r.urn: drift.owned_by_cluster(state, far) for r, state in states}
    assert not {urn: why for urn, why in owned.items() if why}, owned


def test_the_rules_know_what_the_cluster_owns():
    """The check above can fail: each rule on an object of its kind."""

    def secret(annotations: dict) -> dict:
        inputs = {"type": "bootstrap.kubernetes.io/token", "metadata": {"annotations": annotations}}
        return {"urn": "urn:x", "type": drift.SECRET, "inputs": inputs}

    expires = {drift.EXPIRES_ANNOTATION: "2026-01-01T02:00:00Z"}
    assert drift.owned_by_cluster(secret(expires), T0 + HOUR) is None
    assert "token cleaner" in drift.owned_by_cluster(secret(expires), T0 + 2 * HOUR)
    assert drift.owned_by_cluster(secret({}), T0 + 100 * HOUR) is None  # no known expiry
    encoded = base64.b64encode(b"2026-01-01T02:00:00Z").decode()
    plain = {"urn": "urn:x", "type": drift.SECRET}
    plain["inputs"] = {"type": "bootstrap.kubernetes.io/token", "data": {"expiration": encoded}}
    assert "token cleaner" in drift.owned_by_cluster(plain, T0 + 3 * HOUR)
    job = {"urn": "urn:j", "type": drift.JOB, "inputs": {"spec": {"ttlSecondsAfterFinished": 0}}}
    assert "TTL-after-finished" in drift.owned_by_cluster(job, T0)
    labels = {"template": {"metadata": {"labels": {"job-name": "x", "app": "y"}}}}
    job["inputs"] = {"spec": labels}
    assert "job-name" in drift.owned_by_cluster(job, T0)
    assert "kubelet" in drift.owned_by_cluster({"type": "kubernetes:core/v1:Node"}, T0)


def test_a_new_machine_mints_a_token_with_the_clock_of_its_run(graphs, monkeypatch):
    """A machine launched again (here: found gone by a refresh) gets a new record, so a new
    token, with the clock of the run that launched it: ignore_changes carries nothing into a
    replacement (decision 030); its hook finds no Node of the new machine and mints."""
    node_name = node_names(graphs["dev"])[0]
    lost = recovery.refreshed(graphs["dev"], [node_name])
    fake_id = mocks.fake_id
    monkeypatch.setattr(
        mocks,
        "fake_id",
        lambda prefix, name, *rest: fake_id(
            prefix, f"{name}-again" if prefix == "i-" else name, *rest
        ),
    )
    at = T0 + 50 * HOUR
    after = run_program("dev", clock=at, state=lost)
    plan = lifecycle.plan(lost, after)
    record = plan.named(steps.JOIN_TOKEN.resource_name(node_name))
    assert record.action is Action.REPLACE, lifecycle.render(plan)
    state = recovery.state_after(plan, lost, after)
    held = unwrap(state.named(record.name).inputs["input"])
    assert held["registeredAt"] == "2026-01-03T02:00:00Z", held
    assert join_token_of(after, node_name) == f"{held['tokenId']}.{held['tokenSecret']}"


# ---------------------------------------------------------------- the upgrade of a running stack

DEPLOYED = ROOT / "tests" / "deployed"
# The released versions whose states are pinned (`python -m tools.harness.deployed REF DIR`):
# 8c2ffef minted tokens over SSH, 1552dff kept them as Secrets of the Kubernetes provider.
RELEASES = ("8c2ffef", "1552dff")


@pytest.mark.parametrize("pinned", [*STACKS, *VARIANTS])
@pytest.mark.parametrize("release", RELEASES)
def test_the_upgrade_mints_nothing_for_joined_nodes(release, pinned):
    """A running stack gets a record per node (a new resource), whose hook finds every Node
    registered by its machine and mints nothing; no node is drained, reset or re-joined for
    it. From 1552dff, each node's token Secret goes from the state (no delete hook: the
    provider takes the long-gone Secret as deleted), and no GPU Job runs again."""
    stack, config = VARIANTS.get(pinned, (pinned, None))
    before = deployed.load(DEPLOYED / release / f"{pinned}.json.gz")
    after = run_program(stack, config=config, state=before)
    plan = lifecycle.plan(before, after)
    nodes = lifecycle.node_names(before)
    stashes = [c for c in plan.by_action(Action.CREATE) if c.type == STASH]
    # And the cluster's CA hash (decision 066), the same one the joins already pin, and the
    # pools' join-token seeds.
    (ca,) = [c for c in stashes if c.name.endswith("-ca-cert-hash")]
    created = [c for c in stashes if c is not ca and not c.name.endswith("-join-token-seed")]
    assert sorted(c.name for c in created) == sorted(f"{n}-join-token" for n in nodes), (
        lifecycle.render(plan)
    )
    # And each pool's seed, a fresh secret of this run (bootstrap_token.seed).
    pools = {r.name for r in after.of_type("gpu-cluster:index:GpuNodePool")}
    seeds = {c.name for c in stashes} - {c.name for c in created} - {ca.name}
    assert seeds == {f"{p}-join-token-seed" for p in pools}, seeds
    with FakeApiServer() as api:
        for name in nodes:
            api.cluster.add_node(name, machine=before.named(name).id)
        for change in created:
            held = unwrap(after.by_urn[change.urn].inputs["input"])
            assert _mint(api, T0, held).expires is None, change.name
        assert not api.cluster.posts(), api.cluster.posts()
    for impact in plan.nodes.values():
        assert not (impact.drained or impact.reset or impact.rejoined), impact
    if release == "1552dff":
        gone = [c for c in plan.by_action(Action.DELETE) if c.type == drift.SECRET]
        assert sorted(c.name for c in gone) == sorted(f"{n}-join-token" for n in nodes), gone
        assert not any(impact.revalidated for impact in plan.nodes.values()), plan.nodes
