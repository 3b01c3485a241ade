"""How long a roll may take, from the step table alone (no settings: the settings check a
validation timeout against it): a node's slot outlasts its whole change, and it waits for a
slot only as long as its own change still fits in the deploy job, so an `up` that rolls ends by
itself and the next `up` goes on where it stopped.
Why: docs/decisions/033-a-roll-ends-inside-the-deploy-job.md
"""

from __future__ import annotations

from components.hosts import steps

# The deploy job's bound (.github/workflows/pulumi-up.yml `timeout-minutes`: 360, the most GitHub
# gives a job on a hosted runner; a test keeps the two equal).
DEPLOY_JOB_SECONDS = 360 * 60
# The rest of an `up` around a node's roll: dials, the scripts' copy, the engine's own work.
UP_MARGIN_SECONDS = 10 * 60
# Bound on one drain (PodDisruptionBudgets may hold evictions; GPU jobs may stop slowly).
DRAIN_TIMEOUT_SECONDS = 15 * 60
# How long taking a node out waits for the API server to answer (an upgrade restarts it).
API_WAIT_SECONDS = 10 * 60
# On top of the steps' own bounds: SSH dials, the validation Job's scheduling.
SLOT_MARGIN_SECONDS = 30 * 60
READY_TIMEOUT_SECONDS = 10 * 60

# The steps from the first disruptive one (which takes the node out) to its put in service,
# whose bounds a slot must outlast.
_HELD_THROUGH = steps.NODE_STEPS[steps.NODE_STEPS.index(steps.disruptive_steps()[0]) :]


def slot_seconds(validation_seconds: int) -> int:
    """A slot must outlast one node's whole change: every step from the first disruptive one to
    its put in service at its bound, plus the capacity check and the validation Job."""
    return (
        sum(step.timeout_seconds for step in _HELD_THROUGH)
        + 2 * validation_seconds
        + steps.IN_SERVICE.timeout_seconds
        + SLOT_MARGIN_SECONDS
    )


def slot_wait_seconds(validation_seconds: int) -> int:
    """How long a node waits for a slot: whatever is left of the deploy job once its own drain
    and change have their bounds (0: it rolls only when a slot is free at once). The same for
    every node of every pool, so scaling a pool changes no other node's steps."""
    own = DRAIN_TIMEOUT_SECONDS + API_WAIT_SECONDS + slot_seconds(validation_seconds)
    return max(DEPLOY_JOB_SECONDS - UP_MARGIN_SECONDS - own, 0)


def longest_validation_seconds() -> int:
    """The largest validation.timeoutSeconds whose roll of one node fits the deploy job."""
    fixed = DEPLOY_JOB_SECONDS - UP_MARGIN_SECONDS - DRAIN_TIMEOUT_SECONDS - API_WAIT_SECONDS
    return (fixed - slot_seconds(0)) // 2
