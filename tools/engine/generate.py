"""What a module's release build generates before `go build` and its module zip lacks.

pulumi-kubernetes' provider embeds `schema-embed.json` and `terraform-mapping-embed.json`
(cmd/pulumi-resource-kubernetes/main.go, `//go:embed`), which its Makefile (target
`k8sprovider`) makes with `VERSION=... go generate`: generate.go reads schema.json, sets the
package version and writes it compact; it writes terraform-mapping.json compact. Both inputs
ship in the module, but the module cache is read-only and `go build -overlay` may not replace
files in it, so the main package (main.go, copied unchanged) and the two generated files are
written into GENERATED of our module (ignored by git) and built from there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

GENERATED = "generated"


def module_dir(go: str, module_root: Path, module: str) -> Path:
    """Where Go's module cache holds `module` at the version module_root's go.mod selects."""
    result = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=module_root,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(result.stdout)["Dir"])


def kubernetes_main(go: str, module_root: Path, version: str) -> None:
    """pulumi-resource-kubernetes' main package, ready to build, under GENERATED."""
    source = module_dir(go, module_root, "github.com/pulumi/pulumi-kubernetes/provider/v4")
    command = source / "cmd" / "pulumi-resource-kubernetes"
    target = module_root / GENERATED / "pulumi-resource-kubernetes"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(command / "main.go", target / "main.go")
    schema = json.loads((command / "schema.json").read_text())
    schema["version"] = version
    (target / "schema-embed.json").write_text(json.dumps(schema, separators=(",", ":")))
    mapping = json.loads((command / "terraform-mapping.json").read_text())
    (target / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")))


GENERATORS = {"kubernetes-main": kubernetes_main}
