"""Stands for the missing tomllib of Ubuntu 22.04's python3 3.10 (python3.10 3.10.12): CPython
added Lib/tomllib/__init__.py in 3.11 (PEP 680), so `import tomllib` raises ModuleNotFoundError
there, as this module does first on the python3 stub's path."""

raise ModuleNotFoundError("No module named 'tomllib'", name="tomllib")
