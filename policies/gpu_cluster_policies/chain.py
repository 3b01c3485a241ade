"""Names of the node chain, generated from components/hosts/steps.py by
`python -m tools.step_table --write` (the pack's virtualenv has no copy of the program):
do not edit."""

JOIN = "join"
# The node's own steps its join waits for, in chain order: its first contact (host-key
# rotation, scripts' copy), then the steps on the node.
JOIN_FOLLOWS = (
    "host-key-rotation",
    "host-key-switch",
    "scripts",
    "wait-ready",
    "nouveau",
    "driver",
    "runtime",
    "kube-tools",
)
# Of those, the steps only a machine the stack launched has (its boot host key is
# rotated); an existing host is pinned from config and has none.
LAUNCHED_ONLY = ("host-key-rotation", "host-key-switch")
VALIDATION_JOB = "validation-job"
# Steps whose stdout is a credential (a token, a kubeconfig).
SECRET_OUTPUT = ("join-token", "kubeconfig", "operator-kubeconfig")
