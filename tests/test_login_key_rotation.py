"""A new `sshPrivateKey` re-runs every step on every host: pulumi-command compares the
connection like any other input and its `Update` runs the step's script again
(commandController.go `Update`). The scripts find everything in place (each host script's own
tests run it twice); no delete depends on the stored key (decision 058). The day-two plan says
it, and says nothing when only other inputs change.
"""

from __future__ import annotations

from tools import lifecycle
from tools.harness.mocks import ed25519_key
from tools.harness.stacks import run_program, stack_file

ROTATED = {"sshPrivateKey": ed25519_key("rotated login")["privateKeyOpenssh"]}


def test_a_new_login_key_warns_that_every_step_runs_again():
    before = run_program("dev")
    plan = lifecycle.plan(before, run_program("dev", secrets=ROTATED))
    only_key = [c for c in plan.by_action(lifecycle.Action.RERUN) if lifecycle._login_key_only(c)]
    assert only_key, lifecycle.render(plan)
    assert any(c.name.endswith("-driver") for c in only_key), only_key
    text = lifecycle.render(plan)
    assert f"Warning: {len(only_key)} step(s) re-run only because the login key changed" in text
    # The key is a secret: the plan names the input, never its value.
    assert "PRIVATE KEY" not in text, text


def test_other_changes_do_not_warn_of_the_login_key():
    before = run_program("dev")
    pools = [dict(pool, driverVersion="570") for pool in stack_file("dev")["gpu-cluster:nodePools"]]
    text = lifecycle.render(lifecycle.plan(before, run_program("dev", config={"nodePools": pools})))
    assert "login key" not in text, text
