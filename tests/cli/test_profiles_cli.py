"""Tests for ``autoscaler profiles list`` (typer CliRunner, in process)."""

from __future__ import annotations

import json
from importlib import resources

from typer.testing import CliRunner

from autoscaler.cli import app

# The shipped document, read directly rather than through the code under test.
DOC = json.loads(resources.files("models.profiles").joinpath("coefficients.json").read_text())
KEYS = ["name", "model", "gpu", "tensor_parallel", "rows_fitted", "rows_held_out", "heldout_mape"]


def test_json_lists_every_shipped_profile_with_exactly_the_interface_keys() -> None:
    res = CliRunner().invoke(app, ["profiles", "list", "-o", "json"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.output)
    assert [i["name"] for i in items] == sorted(DOC["profiles"])
    for item in items:
        assert list(item) == KEYS
        entry = DOC["profiles"][item["name"]]
        assert {k: item[k] for k in KEYS[1:]} == {k: entry[k] for k in KEYS[1:]}
        tp = item["tensor_parallel"]
        assert item["name"] == f"{item['model']}/{item['gpu']}" + ("" if tp == 1 else f"/tp{tp}")
        assert 0 <= item["heldout_mape"] <= 0.10


def test_table_fits_100_columns_and_shows_each_held_out_error() -> None:
    res = CliRunner().invoke(app, ["profiles", "list"], env={"COLUMNS": "100"}, terminal_width=100)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 100
    for name, entry in DOC["profiles"].items():
        (row,) = [line for line in lines if f" {name} " in line or f" {name}* " in line]
        cells = [c.strip() for c in row.strip("│ ").split("│")]
        assert cells[2:5] == [str(entry["rows_fitted"]), str(entry["rows_held_out"]), f"{entry['heldout_mape']:.1%}"]


GROUP_KEYS = ["name", "group", "rows_held_out", "heldout_mape", "rows_fitted", "fit_mape", "step_form",
              "linear_heldout_mape", "roofline_heldout_mape"]


def test_groups_view_shows_each_row_groups_errors() -> None:
    # Every (profile, group) of the document's heldout_groups and fit_groups, once, with its errors.
    res = CliRunner().invoke(app, ["profiles", "list", "--groups", "-o", "json"])
    assert res.exit_code == 0, res.output
    items = json.loads(res.output)
    expected = {(n, g) for n, e in DOC["profiles"].items() for g in [*e["heldout_groups"], *e["fit_groups"]]}
    assert [(i["name"], i["group"]) for i in items if list(i) == GROUP_KEYS] == [(i["name"], i["group"]) for i in items]
    assert {(i["name"], i["group"]) for i in items} == expected and len(items) == len(expected)
    for i in items:
        entry = DOC["profiles"][i["name"]]
        held = entry["heldout_groups"].get(i["group"])
        assert (i["rows_held_out"], i["heldout_mape"]) == ((held["rows"], held["mape"]) if held else (0, None))
        # Both forms' held-out errors; the shipped form's is the group's.
        assert i["step_form"] == entry["step_form"]
        for form in ("linear", "roofline"):
            g = entry["forms"][form]["heldout_groups"].get(i["group"])
            assert i[f"{form}_heldout_mape"] == (g["mape"] if g else None)
        assert i[f"{i['step_form']}_heldout_mape"] == i["heldout_mape"]
    # The Splitwise profiles' long prefills are a held-out group of five 8192-token rows.
    long = [i for i in items if i["name"] == "llama-2-70b/a100-80gb/tp8" and i["group"] == "prefill > 2048"]
    assert [(i["rows_held_out"], i["rows_fitted"]) for i in long] == [(5, 5)]


def test_groups_table_prints_each_held_out_group_error() -> None:
    # At 80 columns: each profile's own row names the form it ships, and each of its held-out groups'
    # rows below it carries the document's counts and errors, uncut.
    res = CliRunner().invoke(app, ["profiles", "list", "--groups"], env={"COLUMNS": "80"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "\u2026" not in res.output  # nothing cut to an ellipsis
    starts = {line.split()[0]: i for i, line in enumerate(lines)
              if line.split() and line.split()[0] in DOC["profiles"]}
    assert set(starts) == set(DOC["profiles"])
    for name, entry in DOC["profiles"].items():
        assert lines[starts[name]].split()[1:] == ["ships", entry["step_form"]], name
        below = []
        for line in lines[starts[name] + 1:]:
            if not line.startswith("   "):
                break
            below.append(line)
        for group, held in entry["heldout_groups"].items():
            (row,) = [line for line in below if line[3:].startswith(group + "  ")]
            cells = row[3 + len(group):].split()
            flag = "!" if held["mape"] > 0.10 else ""
            assert cells[0:2] == [str(held["rows"]), f"{held['mape']:.1%}{flag}"], (name, group)
            other = "roofline" if entry["step_form"] == "linear" else "linear"
            e = entry["forms"][other]["heldout_groups"][group]["mape"]
            assert cells[-2:] == [other, f"{e:.1%}" + ("!" if e > 0.10 else "")], (name, group)
