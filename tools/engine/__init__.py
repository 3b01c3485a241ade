"""The real engine for the tests: the Pulumi CLI, its providers, kube-apiserver and etcd, built
from their Go modules into build/engine/ (`python -m tools.engine build`)."""
