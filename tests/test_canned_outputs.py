"""The step outputs the harness's mocks answer with (tools/harness/mocks.py COMMAND_STDOUT) are
what the scripts print: each is held to the script it stands for, run for real (bash, and the
sandbox for read-kubeconfig.sh, with openssl computing the CA hash)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import yaml

from components.hosts.rendering import render_script
from tests.helpers.control_plane_host import ADMIN_KUBECONFIG
from tests.sandbox import Sandbox, needs_sandbox
from tools.harness import mocks
from tools.harness.stacks import ROOT

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
CA_HASH_LINE = re.compile(r"# ca-cert-hash: sha256:[0-9a-f]{64}")


def script_function(script: str, call: str) -> str:
    """Run one function of a script as the program renders it (without its main call)."""
    program = render_script(script, {}).removesuffix('main "$@"\n') + call + "\n"
    result = subprocess.run(["bash", "-s"], input=program, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def shape(value, path: str = "") -> set[str]:
    """The key paths of a parsed YAML document (lists by position)."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in shape(v, f"{path}.{k}")} | {path}
    if isinstance(value, list):
        return {p for i, v in enumerate(value) for p in shape(v, f"{path}[{i}]")} | {path}
    return {path}


# install-kube-tools.sh's last step in the releases before b78550f, as they shipped it (git show
# b78550f^:components/hosts/scripts/install-kube-tools.sh; copied, since a shallow checkout has
# no history): what their kube-tools steps printed, which their programs read.
EARLIER_PRINT_READY_TO_JOIN = """print_ready_to_join() {
  printf '{"readyToJoinAt": "%s"}\\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
"""


def test_the_kube_tools_answer_is_what_print_ready_to_join_prints():
    """The earlier releases' function, run by bash, and the canned answer: one JSON line with
    the same keys and a UTC timestamp; this version's script no longer has the function."""
    assert "print_ready_to_join" not in render_script("install-kube-tools.sh", {})
    shipped = subprocess.run(
        ["git", "show", "b78550f^:components/hosts/scripts/install-kube-tools.sh"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shipped.returncode == 0:  # a checkout with the history: the copy is what shipped
        assert EARLIER_PRINT_READY_TO_JOIN in shipped.stdout
    program = EARLIER_PRINT_READY_TO_JOIN + "print_ready_to_join\n"
    run = subprocess.run(["bash", "-s"], input=program, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    real = run.stdout
    canned = mocks.COMMAND_STDOUT["-kube-tools"](SimpleNamespace(name="n-kube-tools"))
    for text in (real, canned):
        assert text.endswith("\n") and text.count("\n") == 1, text
    real_doc, canned_doc = json.loads(real), json.loads(canned)
    assert real_doc.keys() == canned_doc.keys()
    assert all(TIMESTAMP.fullmatch(doc["readyToJoinAt"]) for doc in (real_doc, canned_doc))
    assert TIMESTAMP.sub("T", real) == TIMESTAMP.sub("T", canned), (real, canned)


def test_the_join_token_answer_has_the_shape_the_earlier_script_printed():
    """mint-join-token.sh `print_credentials` (before 1824a45): {"token": ..., "caCertHash": ...}
    on one line, the token as kubeadm prints one."""
    canned = mocks.COMMAND_STDOUT["-join-token"](SimpleNamespace(name="n-join-token"))
    doc = json.loads(canned)
    assert list(doc) == ["token", "caCertHash"]
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", doc["token"])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", doc["caCertHash"])


@needs_sandbox
def test_the_kubeconfig_answer_has_the_shape_read_kubeconfig_prints(tmp_path: Path, ca_cert):
    sb = Sandbox(tmp_path)
    sb.write("/etc/kubernetes/admin.conf", ADMIN_KUBECONFIG, 0o600)
    sb.write("/etc/kubernetes/pki/ca.crt", ca_cert)
    result = sb.run("read-kubeconfig.sh", {"API_SERVER": "https://203.0.113.10:6443"})
    assert result.returncode == 0, result.stderr
    canned = mocks.COMMAND_STDOUT["-kubeconfig"](SimpleNamespace(name="cp-kubeconfig", inputs={}))
    for text in (result.stdout, canned):
        assert CA_HASH_LINE.fullmatch(text.splitlines()[-1]), text.splitlines()[-1]
    assert shape(yaml.safe_load(result.stdout)) == shape(yaml.safe_load(canned))
    server = yaml.safe_load(canned)["clusters"][0]["cluster"]["server"]
    assert server == yaml.safe_load(result.stdout)["clusters"][0]["cluster"]["server"]


# /version as kube-apiserver 1.35.0 answered it (captured: `curl -k https://<server>/version`).
VERSION_1_35_0 = """{
  "major": "1",
  "minor": "35",
  "emulationMajor": "1",
  "emulationMinor": "35",
  "minCompatibilityMajor": "1",
  "minCompatibilityMinor": "34",
  "gitVersion": "v1.35.0",
  "gitCommit": "66452049f3d692768c39c797b21b793dce80314e",
  "gitTreeState": "clean",
  "buildDate": "2025-12-17T12:32:07Z",
  "goVersion": "go1.25.5",
  "compiler": "gc",
  "platform": "linux/amd64"
}
"""


def test_the_api_servers_version_is_read_as_json():
    """lib/common.sh `version_minor_of` on the answers an API server (or what stands in front
    of it) gives: the captured 1.35 body, the same on one line, a distribution's build suffix,
    a proxy's page and a JSON body without gitVersion."""
    samples = {
        VERSION_1_35_0: "1.35",
        json.dumps(json.loads(VERSION_1_35_0), separators=(",", ":")): "1.35",
        '{"gitVersion" : "v1.34.1+k3s1", "major": "1"}': "1.34",
        "<html><body>Proxy Authentication Required</body></html>": "",
        '{"kind": "Status", "status": "Failure", "code": 403}': "",
    }
    for body, minor in samples.items():
        call = f"version_minor_of {shlex.quote(body)}"
        assert script_function("check-version-skew.sh", call).strip() == minor, body
