"""Every benchmark script's command line is documented: its parser has a description and every argument
a help string (``python benchmarks/<name>.py --help``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.paths import ROOT

SCRIPTS = sorted((ROOT / "benchmarks").rglob("*.py"))


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Every call of ``<x>.name(...)`` or ``name(...)`` in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name):
                out.append(node)
    return out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_argument_has_help_and_the_parser_a_description(script: Path) -> None:
    tree = ast.parse(script.read_text())
    for call in calls(tree, "ArgumentParser"):
        assert any(k.arg == "description" for k in call.keywords), f"{script.name}:{call.lineno}: no description"
    for call in calls(tree, "add_argument"):
        assert any(k.arg == "help" for k in call.keywords), f"{script.name}:{call.lineno}: no help"


def test_the_scan_finds_parsers() -> None:
    assert sum(len(calls(ast.parse(s.read_text()), "add_argument")) for s in SCRIPTS) >= 30
