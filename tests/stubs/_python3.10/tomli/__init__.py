"""Stands for tomli 1.2.2 as jammy's python3-tomli (1.2.2-2) installs it: `loads(str)` and
`load(binary file)`, raising TOMLDecodeError (tomli/_parser.py `loads`, `load`).

This machine's stdlib tomllib, which is tomli's code (PEP 680: "tomllib is based on tomli"),
loaded under tomli's name.
"""

import importlib.util
import sys
import sysconfig
from pathlib import Path

_source = Path(sysconfig.get_path("stdlib")) / "tomllib"
_spec = importlib.util.spec_from_file_location(
    "_tomli_from_stdlib", _source / "__init__.py", submodule_search_locations=[str(_source)]
)
_module = importlib.util.module_from_spec(_spec)
sys.modules["_tomli_from_stdlib"] = _module
_spec.loader.exec_module(_module)
loads = _module.loads
load = _module.load
TOMLDecodeError = _module.TOMLDecodeError
