"""tools.mutation on tiny inputs: the mutators, the seeded sample, the map from source files to
tests, and one end-to-end run on a two-file project (seconds, not the real benchmark)."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tools.mutation import bash, coverage_map, python, readers
from tools.mutation.coverage_map import LineMap, _node_id, selection_for
from tools.mutation.mutants import sample
from tools.mutation.run import choose, execute
from tools.mutation.testmap import Selection, matching_tests

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    # header: fatal "not code"
    set -Eeuo pipefail

    reset() {
      local found
      timeout -k 30 "${RESET_TIMEOUT_SECONDS:-300}" kubeadm reset -f
      [[ -f /etc/kubernetes/kubelet.conf ]] ||
        fatal "kubelet.conf expected"
      if ((count >= 3)) && [[ "${a}" == b ]]; then
        return 1
      fi
      cat >/etc/x.conf <<'CONF'
    fatal inside a heredoc
    CONF
      systemctl restart kubelet
      log "done"
    }
    """
)


def _mutated_lines(tmp_path: Path) -> dict[str, list[str]]:
    path = tmp_path / "reset.sh"
    path.write_text(SCRIPT)
    found: dict[str, list[str]] = {}
    for mutant in bash.mutants_of(path, "reset.sh"):
        changed = [line for line in mutant.diff(SCRIPT).splitlines() if line.startswith("+")]
        found.setdefault(mutant.operator.removeprefix("bash/"), []).extend(changed)
    return found


def test_bash_mutator_makes_the_mistakes_a_reviewer_misses(tmp_path):
    found = _mutated_lines(tmp_path)
    assert found["fatal-to-log"] == ['+    log "kubelet.conf expected"']
    assert found["default-number"] == [
        '+  timeout -k 30 "${RESET_TIMEOUT_SECONDS:-1}" kubeadm reset -f'
    ]
    assert found["drop-errexit"] == ["+set -Euo pipefail"]
    assert '+  if ! ((count >= 3)) && [[ "${a}" == b ]]; then' in found["negate-condition"]
    assert "+  ! [[ -f /etc/kubernetes/kubelet.conf ]] ||" in found["negate-condition"]
    assert '+  if ((count >= 3)) && [[ "${a}" != b ]]; then' in found["swap-equality"]
    assert '+  if ((count >= 3)) || [[ "${a}" == b ]]; then' in found["swap-and-or"]
    assert '+  if ((count > 3)) && [[ "${a}" == b ]]; then' in found["numeric-compare"]
    assert found["exit-status"] == ["+    return 0"]
    assert "+  :" in found["drop-command"]  # systemctl restart kubelet
    every = "\n".join(line for lines in found.values() for line in lines)
    assert "heredoc" not in every and "not code" not in every
    assert "+  :\n" not in every.replace("+  :", "", found["drop-command"].count("+  :"))


def test_bash_mutants_that_do_not_parse_are_not_sampled(tmp_path):
    path = tmp_path / "reset.sh"
    path.write_text(SCRIPT)
    mutants = bash.mutants_of(path, "reset.sh")
    assert all(bash.parses(m, SCRIPT) for m in sample(mutants, 50, seed=1))
    broken = next(m for m in mutants if m.operator == "bash/swap-and-or")
    assert not bash.parses(
        type(broken)(**{**broken.__dict__, "apply": lambda t: t + "fi\n"}), SCRIPT
    )


def test_sample_is_seeded_and_takes_one_mutant_per_site(tmp_path):
    path = tmp_path / "reset.sh"
    path.write_text(SCRIPT)
    mutants = bash.mutants_of(path, "reset.sh")
    first = [m.key for m in sample(mutants, 5, seed=7)]
    assert first == [m.key for m in sample(mutants, 5, seed=7)]
    assert len(first) == 5
    sites = [(m.path, m.site) for m in sample(mutants, 100, seed=7)]
    assert len(sites) == len(set(sites)) == len({(m.path, m.site) for m in mutants})
    assert any([m.key for m in sample(mutants, 5, seed=s)] != first for s in range(8, 12)), (
        "the seed changes nothing"
    )


def test_python_mutants_come_from_cosmic_ray_and_skip_signature_annotations(tmp_path):
    code = textwrap.dedent(
        """\
        from __future__ import annotations


        def positive(value: int | float) -> bool:
            return value > 0 and value < 10
        """
    )
    path = tmp_path / "m.py"
    path.write_text(code)
    mutants = python.mutants_of(path, "m.py")
    operators = {m.operator for m in mutants}
    assert {"core/ReplaceAndWithOr", "core/ReplaceComparisonOperator_Gt_GtE"} <= operators
    mutated = {m.operator: m.apply(code) for m in mutants}
    assert "value > 0 or value < 10" in mutated["core/ReplaceAndWithOr"]
    annotation = next(m for m in mutants if m.line == 4 and "BitOr" in m.operator)
    assert not python.changes_behaviour(code, annotation.apply(code))
    assert python.changes_behaviour(code, mutated["core/ReplaceAndWithOr"])


def test_each_source_file_maps_to_the_tests_that_exercise_it():
    reset = matching_tests("components/hosts/scripts/reset-node.sh", ROOT).files
    assert "tests/test_production_defaults.py" in reset and "tests/test_node_scripts.py" in reset
    assert "tests/test_lint.py" not in reset
    network = matching_tests("components/aws/network.py", ROOT).files
    assert network[0] == "tests/test_network.py", network
    assert "tests/test_identity.py" in network  # runs the program: sees every component
    policies = matching_tests("policies/gpu_cluster_policies/validators.py", ROOT).files
    assert "tests/test_policies.py" in policies
    common = matching_tests("components/hosts/scripts/lib/common.sh", ROOT).files
    assert "tests/test_field_failures.py" in common


def limits_project(root: Path, *, tests_package: bool = True, extra_tests: str = "") -> Path:
    """A two-file project under git in `root`: components/limits.py (`in_range`) and the test
    that holds its bounds (tests/test_limits.py, returned); `extra_tests`: tests/test_other.py."""
    (root / "components").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "components" / "__init__.py").write_text("")
    if tests_package:
        (root / "tests" / "__init__.py").write_text("")
    (root / "components" / "limits.py").write_text(
        "def in_range(value):\n    return 0 < value <= 10\n"
    )
    test = root / "tests" / "test_limits.py"
    test.write_text(
        "from components.limits import in_range\n\n\n"
        "def test_bounds():\n    assert in_range(1) and not in_range(0)\n"
    )
    if extra_tests:
        (root / "tests" / "test_other.py").write_text(extra_tests)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return test


def test_a_tiny_project_gets_a_kill_rate_and_its_survivors(tmp_path):
    limits_project(tmp_path)
    mutants = choose(tmp_path, ["components/limits.py"], 2, seed=1)
    assert len(mutants) == 2
    report = execute(tmp_path, mutants, timeout=120)
    assert len(report.outcomes) == 2
    killed, total = report.per_file()["components/limits.py"]
    assert total == 2 and killed > 0
    text = report.text()
    assert "components/limits.py" in text and "python:" in text
    for survivor in report.survivors():
        assert survivor.key in text and survivor.diff.splitlines()[0] in text
    assert (tmp_path / "components" / "limits.py").read_text().startswith("def in_range(value):\n")


def test_the_coverage_run_is_kept_and_reused(tmp_path):
    """The line map costs a suite run under coverage: `coverage_data` keeps it (with each test's
    seconds) for the next run over the same tests, which then skips that run."""
    project = tmp_path / "project"
    limits_project(project)
    mutants = choose(project, ["components/limits.py"], 2, seed=1)
    kept = tmp_path / "coverage" / "data"
    first = execute(project, mutants, timeout=120, coverage_data=kept)
    assert kept.exists()
    durations = kept.with_name("data.durations.json").read_text()
    assert "tests/test_limits.py::test_bounds" in durations
    kept.with_name("data.durations.json").write_text('{"tests/test_limits.py::test_bounds": 7.5}')
    second = execute(project, mutants, timeout=120, coverage_data=kept)
    assert [o.status for o in second.outcomes] == [o.status for o in first.outcomes]
    assert any(o.caught_by.startswith("FAILED tests/test_limits.py") for o in second.outcomes)


def test_the_tests_of_a_line_run_fastest_first():
    lines = {
        "components/a.py": {3: ["tests/t.py::slow", "tests/t.py::unknown", "tests/t.py::fast"]}
    }
    seconds = {"tests/t.py::slow": 9.0, "tests/t.py::fast": 0.2}
    assert LineMap(lines, seconds).tests_of("components/a.py", 3) == [
        "tests/t.py::fast",
        "tests/t.py::slow",
        "tests/t.py::unknown",
    ]
    assert LineMap(lines, seconds).tests_of("components/a.py", 4) == []


def test_contexts_of_test_modules_without_a_package_map_to_node_ids(tmp_path):
    """pytest imports tests/test_x.py as `test_x` when tests/ has no __init__.py; such a context
    still names its test (a map without them sent every mutant to the whole suite)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_limits.py").write_text("")
    assert _node_id("test_limits.test_bounds", tmp_path) == "tests/test_limits.py::test_bounds"
    assert _node_id("tests.test_limits.test_bounds", tmp_path) == (
        "tests/test_limits.py::test_bounds"
    )
    assert _node_id("elsewhere.test_bounds", tmp_path) is None


MODULE = textwrap.dedent(
    """\
    LIMIT = 10


    class Pool:
        count: int = 3

        @property
        def doubled(self):
            return 2 * self.count


    def in_range(value):
        return 0 < value <= LIMIT
    """
)


def test_an_import_time_line_names_what_it_defines():
    assert readers.defined_at(MODULE, 1) == readers.Names(("LIMIT",), (), (1, 1))
    assert readers.defined_at(MODULE, 5) == readers.Names(("Pool",), ("count",), (5, 5))
    assert readers.defined_at(MODULE, 7) == readers.Names(("Pool",), ("doubled",), (7, 9))
    assert readers.defined_at(MODULE, 12).module == ("in_range",)
    assert readers.defined_at(MODULE, 2) == readers.Names()


def test_an_import_time_line_runs_the_tests_that_execute_its_readers(tmp_path):
    (tmp_path / "components").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "components" / "limits.py").write_text(MODULE)
    (tmp_path / "tests" / "test_pins.py").write_text("from components.limits import LIMIT\n")
    coverage = LineMap(
        {"components/limits.py": {9: ["tests/test_pool.py::test_doubled"], 13: ["t.py::a"]}},
        {"t.py::a": 2.0},
    )
    fallback = Selection(("tests/everything.py",))
    limit = selection_for("components/limits.py", 1, coverage, fallback, tmp_path)
    assert limit.files == ("t.py::a", "tests/test_pins.py")  # line 13 reads LIMIT
    count = selection_for("components/limits.py", 5, coverage, fallback, tmp_path)
    assert count.files == ("tests/test_pool.py::test_doubled",)  # `self.count` on line 9
    assert selection_for("components/limits.py", 2, coverage, fallback, tmp_path) == fallback
    assert selection_for("components/limits.py", 9, coverage, fallback, tmp_path).files == (
        "tests/test_pool.py::test_doubled",
    )


def test_a_stopped_run_goes_on_from_its_journal(tmp_path):
    """Each outcome is appended as it is decided; a second run over the same sample takes them
    from the journal instead of running the mutants again."""
    project = tmp_path / "project"
    test = limits_project(project, tests_package=False)
    mutants = choose(project, ["components/limits.py"], 2, seed=1)
    journal = tmp_path / "journal.jsonl"
    first = execute(project, mutants, timeout=120, journal=journal)
    assert len(journal.read_text().splitlines()) == 2
    assert any(o.status == "killed" for o in first.outcomes)
    # Were the mutants run again, nothing would be killed now.
    test.write_text("def test_bounds():\n    pass\n")
    again = execute(project, mutants, timeout=120, journal=journal)
    assert [(o.key, o.status) for o in again.outcomes] == [
        (o.key, o.status) for o in first.outcomes
    ]
    assert len(journal.read_text().splitlines()) == 2
    kept = json.loads(journal.read_text().splitlines()[0])
    journal.write_text(journal.read_text().splitlines()[0] + "\n{cut sho")
    resumed = {
        o.diff: o.status for o in execute(project, mutants, timeout=120, journal=journal).outcomes
    }
    assert resumed.pop(kept["diff"]) == kept["status"]  # taken from the journal
    assert list(resumed.values()) in (["survived"], ["no-tests"])  # run again, nothing kills


def test_tests_of_the_files_naming_the_source_run_first():
    lines = {"components/a.py": {3: ["tests/t.py::fast", "tests/test_a.py::slow"]}}
    seconds = {"tests/t.py::fast": 0.2, "tests/test_a.py::slow": 9.0}
    assert LineMap(lines, seconds).tests_of("components/a.py", 3, {"tests/test_a.py"}) == [
        "tests/test_a.py::slow",
        "tests/t.py::fast",
    ]


def test_named_runs_the_test_files_that_name_the_module_without_a_coverage_run(tmp_path):
    limits_project(tmp_path, tests_package=False, extra_tests="def test_nothing():\n    pass\n")
    mutants = choose(tmp_path, ["components/limits.py"], 2, seed=1)
    messages: list[str] = []
    report = execute(tmp_path, mutants, timeout=120, named=True, progress=messages.append)
    assert not any(m.startswith("coverage run") for m in messages), messages
    killed = [o for o in report.outcomes if o.status == "killed"]
    assert killed and all("tests/test_limits.py" in o.caught_by for o in killed)


def test_a_line_run_by_a_module_fixture_belongs_to_its_whole_test_file(tmp_path):
    """Most program tests build the graph once per module in a fixture; the lines that run
    there are seen by every test of that file, not by none of them."""
    (tmp_path / "components").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "components" / "__init__.py").write_text("")
    (tmp_path / "components" / "limits.py").write_text(
        "def in_range(value):\n    return 0 < value <= 10\n\n\ndef label(value):\n"
        "    return f'v{value}'\n"
    )
    (tmp_path / "tests" / "test_limits.py").write_text(
        "import pytest\n\nfrom components.limits import in_range, label\n\n\n"
        "@pytest.fixture(scope='module')\ndef ranged():\n    return in_range(5)\n\n\n"
        "def test_fixture(ranged):\n    assert ranged\n\n\n"
        "def test_label():\n    assert label(3) == 'v3'\n"
    )
    found = coverage_map.line_tests(tmp_path, ["tests/test_limits.py"], timeout=120)
    assert found.tests_of("components/limits.py", 2) == ["tests/test_limits.py"]
    assert found.tests_of("components/limits.py", 6) == ["tests/test_limits.py::test_label"]
    assert found.seconds["tests/test_limits.py::test_label"] >= 0
