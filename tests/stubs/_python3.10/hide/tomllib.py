"""Ubuntu 22.04's python3 is 3.10: the standard library has no tomllib (added in 3.11)."""

raise ModuleNotFoundError("No module named 'tomllib'", name="tomllib")
