"""The Kubernetes side: manifests, the device plugin, add-ons, feature discovery, checks."""
