"""A roll ends inside the deploy job: each node waits for a slot only as long as its own change
(every step at its bound) still fits the job's `timeout-minutes`, so an `up` that rolls ends by
itself, naming the nodes still waiting, and the next `up` goes on where it stopped. A job killed
at its timeout would instead leave pending operations in the state and slots held until they
expire."""

from __future__ import annotations

import pytest
import yaml

from components.hosts import roll_budget, rolling
from components.settings.load import ConfigError
from tools.harness.stacks import ROOT, STACKS, load_stack_settings, run_program, stack_file

WORKFLOW = ROOT / ".github" / "workflows" / "pulumi-up.yml"


def _job_seconds() -> int:
    jobs = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]
    (job,) = jobs.values()
    return int(job["timeout-minutes"]) * 60


def test_the_program_bounds_its_rolls_by_the_deploy_jobs_timeout():
    assert _job_seconds() == roll_budget.DEPLOY_JOB_SECONDS, (
        f"{WORKFLOW.name} gives the `up` {_job_seconds()}s, the roll is bounded by "
        f"roll_budget.DEPLOY_JOB_SECONDS = {roll_budget.DEPLOY_JOB_SECONDS}s: keep them equal"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_nodes_take_out_to_put_in_service_ends_inside_the_job(stack):
    """From the stack's own validation bound: a node that waits for its slot as long as it may,
    then is drained and changed with every step at its bound, ends inside the job."""
    settings = load_stack_settings(stack)
    timing = rolling.roll_timing(validation_seconds=settings.validation.timeout_seconds)
    waited_and_changed = timing.take_out_seconds + timing.slot_seconds
    assert waited_and_changed + roll_budget.UP_MARGIN_SECONDS <= _job_seconds(), stack
    assert timing.slot_wait_seconds > 0, f"{stack}: no node would ever wait"
    # Each node's put in service is there to give its slot back.
    graph = run_program(stack)
    assert graph.find(lambda r: r.name.endswith("-in-service")), f"{stack}: no put in service"


def test_a_validation_timeout_too_long_for_one_job_is_refused_naming_the_key():
    longest = roll_budget.longest_validation_seconds()
    validation = dict(stack_file("dev")["gpu-cluster:validation"], timeoutSeconds=longest)
    assert load_stack_settings("dev", config={"validation": validation})
    validation["timeoutSeconds"] = longest + 1
    with pytest.raises(ConfigError) as error:
        load_stack_settings("dev", config={"validation": validation})
    message = str(error.value)
    assert "gpu-cluster:validation.timeoutSeconds" in message and f"at most {longest}" in message
