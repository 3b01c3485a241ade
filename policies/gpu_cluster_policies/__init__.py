"""gpu-cluster's CrossGuard policies: pure validators (`validators`) and their pulumi_policy
adapters (`pack`). `policies/__main__.py` only builds the PolicyPack from them."""
