"""The YAML dumper the program writes documents with (a cloud-config, the device plugin's
config): PyYAML's `SafeDumper` with libyaml's emitter, `CSafeDumper`, where PyYAML carries it
(its wheels do; PyYAML is pinned). It writes the same bytes as PyYAML's own emitter (tests/
test_host_keys.py and tests/test_device_plugin.py compare them for each document) at a fraction
of the cost: the pure-Python emitter reads every scalar character by character, and a host's
private key alone was 3 % of what the program spent per node. Where PyYAML was built without
libyaml, its own."""

from __future__ import annotations

import yaml

SAFE_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
