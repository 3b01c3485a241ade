"""docs/configuration.md's reference is the one generated from the settings model, and the
generator covers every key. Regenerate with: python -m tools.config_reference --write"""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from components import settings
from tools import config_reference as ref


def _leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path of the model, walked independently of the generator."""
    found: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        found.add(key)
        annotation = field.annotation
        for candidate in (annotation, *typing.get_args(annotation)):
            inner = typing.get_args(candidate)[0] if typing.get_origin(candidate) else candidate
            for item in (candidate, inner, *typing.get_args(candidate)):
                if isinstance(item, type) and issubclass(item, BaseModel) and item is not model:
                    sep = "[]." if typing.get_origin(annotation) is list else "."
                    found |= _leaf_paths(item, f"{key}{sep}")
    return found


def test_the_reference_block_matches_the_settings_model():
    text = ref.REFERENCE.read_text(encoding="utf-8")
    try:
        block = ref.current_block(text)
    except ref.MarkersMissing as exc:
        pytest.fail(f"{ref.REFERENCE_NAME}: {exc}; then run `{ref.REGENERATE}`")
    assert block == ref.render(), (
        f"{ref.REFERENCE_NAME} differs from components/settings/: run `{ref.REGENERATE}`"
    )


def test_check_passes_on_the_committed_reference(capsys):
    assert ref.main(["--check"]) == 0, capsys.readouterr().err


def test_the_readme_links_to_the_reference():
    readme = (ref.ROOT / "README.md").read_text(encoding="utf-8")
    assert f"]({ref.REFERENCE_NAME})" in readme, "README.md does not link the config reference"
    assert ref.START not in readme, "README.md still holds a generated config reference"


def test_every_key_of_the_model_has_a_row():
    keys = {row.key for row in ref.rows()}
    expected = _leaf_paths(settings.Settings)
    assert expected - keys == set(), f"keys missing from the reference: {sorted(expected - keys)}"
    assert "nodePools[].instanceType" in keys, f"no nodePools[].instanceType row in {sorted(keys)}"
    assert "nodePools[].taints[].effect" in keys, f"no nested list row in {sorted(keys)}"
    assert "controlPlane.endpoint" in keys, f"no row for a union variant's key in {sorted(keys)}"


def test_every_row_has_a_description_and_type():
    for row in ref.rows():
        assert row.description.strip(), f"{row.key}: no description (add description= in settings)"
        assert row.type, f"{row.key}: no type"
        assert row.default, f"{row.key}: no default column"


@pytest.mark.parametrize(
    ("key", "column", "expected"),
    [
        ("nodePools[].count", "default", "**required**"),
        ("nodePools[].count", "accepted", "0 to 1000"),
        ("nodePools[].market", "accepted", "`on-demand`, `spot`, `capacity-block`"),
        ("nodePools[].market", "default", "`on-demand`"),
        ("devicePlugin.migStrategy", "accepted", "`none`, `single`, `mixed`"),
        ("sshPrivateKey", "type", "secret string"),
        ("kubernetesVersion", "accepted", ", ".join(settings.SUPPORTED_KUBERNETES_MINORS)),
        ("controlPlane.mode", "accepted", "`managed`, `existing`"),
        ("network.subnetIds", "type", "list of string"),
        ("tags", "type", "map of string to string"),
    ],
)
def test_rows_carry_what_the_model_says(key, column, expected):
    row = next((r for r in ref.rows() if r.key == key), None)
    assert row is not None, f"no row for {key}"
    assert getattr(row, column) == expected, f"{key}: {column} is {getattr(row, column)!r}"


def test_rewrite_replaces_only_the_block():
    text = f"# Title\n\nbefore\n{ref.START}\nstale\n{ref.END}\nafter\n"
    updated = ref.rewrite(text)
    assert updated.startswith("# Title\n\nbefore\n") and updated.endswith(f"{ref.END}\nafter\n")
    assert "stale" not in updated and ref.render() in updated, "block not replaced"
    assert ref.rewrite(updated) == updated, "rewriting twice changes the file"


def test_missing_markers_are_reported():
    with pytest.raises(ref.MarkersMissing, match="config-reference:start"):
        ref.rewrite("# no markers here\n")


def test_table_cells_escape_markdown():
    table = ref.render()
    for line in table.splitlines()[2:]:
        assert "<clusterName>" not in line, f"an HTML-like tag in a cell: {line}"
        assert line.count(" | ") + 2 == 6 or not line.startswith("|"), f"bad row: {line}"
