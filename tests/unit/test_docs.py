"""Every reference to the docs resolves: ``docs/<page>.md`` and ``docs/<page>.md#<anchor>`` in the code
and the docs name a page that exists and, with an anchor, one of its headings (GitHub's slug of the
heading); every relative markdown link in README.md and docs/*.md names a file in the repository (and
a heading, with an anchor)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from support.paths import ROOT

DOCS = ROOT / "docs"
SKIP_DIRS = frozenset({"__pycache__", "build", "dist", "out", "runs", "node_modules"})
"""Folders never scanned (besides hidden ones, such as ``.venv``, and ``*.egg-info``): build and run outputs."""

UPSTREAM = frozenset({
    "docs/saturation-analyzer.md",
    "docs/saturation-scaling-config.md",
    "docs/probabilistic-admitter.md",
    "docs/disaggregation.md",
})
"""``docs/<page>.md`` paths the code cites in another repository (llm-d's WVA and inference scheduler,
docs/anchors.md), not pages of ours. A path in a subfolder of ``docs/`` (``docs/design/...``) is never
read as ours: our docs folder is flat."""

# ``docs/<page>.md`` with an optional ``#anchor``, not inside a longer path (``../shared/docs/x.md``,
# ``design-docs/x.md``).
REFERENCE = re.compile(r"(?<![\w./-])(docs/[\w.-]+\.md)(?:#([\w-]+))?")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: link targets, markup and punctuation dropped, lower case,
    spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a markdown text outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of a markdown page: its headings' slugs (a repeated one numbered ``-1``, ``-2``, as
    GitHub does) and explicit ``<a id=...>`` anchors."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        out.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if m is None:
            continue
        s = slug(m.group(2))
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.add(s if k == 0 else f"{s}-{k}")
    return frozenset(out)


def source_files(root: Path) -> list[Path]:
    """Every ``*.py`` and ``*.md`` file under ``root`` outside hidden, build and output folders."""
    out: list[Path] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        for p in sorted(folder.iterdir()):
            if p.is_dir():
                if not (p.name.startswith(".") or p.name in SKIP_DIRS or p.name.endswith(".egg-info")):
                    stack.append(p)
            elif p.suffix in (".py", ".md"):
                out.append(p)
    return out


def broken_references(root: Path) -> tuple[list[str], int]:
    """(each ``docs/<page>.md[#anchor]`` reference under ``root`` that does not resolve, with where it
    is; how many references were checked)."""
    broken: list[str] = []
    checked = 0
    for f in source_files(root):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for m in REFERENCE.finditer(line):
                path, anchor = m.group(1), m.group(2)
                if path in UPSTREAM:
                    continue
                checked += 1
                where = f"{f.relative_to(root)}:{n}: {m.group(0)}"
                page = root / path
                if not page.is_file():
                    broken.append(f"{where}: no such page")
                elif anchor is not None and anchor not in anchors(page):
                    broken.append(f"{where}: no heading with that anchor")
    return broken, checked


def broken_links(root: Path) -> tuple[list[str], int]:
    """(each relative markdown link of README.md and docs/*.md that does not resolve to a file or folder
    in ``root``, or to a heading of the page it names, with where it is; how many links were checked)."""
    broken: list[str] = []
    checked = 0
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    top = root.resolve()
    for page in pages:
        for n, line in prose_lines(page.read_text(encoding="utf-8")):
            for m in LINK.finditer(INLINE_CODE.sub("", line)):
                target = m.group(1)
                if SCHEME.match(target):
                    continue
                checked += 1
                where = f"{page.relative_to(root)}:{n}: {target}"
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page.resolve()
                if not dest.is_relative_to(top):
                    broken.append(f"{where}: outside the repository")
                elif not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where}: no heading with that anchor")
    return broken, checked


def test_slug_follows_github() -> None:
    assert slug("The contract (`controllers/base.py`)") == "the-contract-controllersbasepy"
    assert slug("llm-d WVA and the endpoint picker") == "llm-d-wva-and-the-endpoint-picker"
    assert slug("Update, 2026-12: what moved") == "update-2026-12-what-moved"
    assert slug("[Knative](https://knative.dev) KPA") == "knative-kpa"


def test_anchors_skip_code_and_number_repeats(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n```bash\n# not a heading\n```\n\n## Notes\n\n## Notes\n<a id=\"here\"></a>\n")
    assert anchors(page) == {"title", "notes", "notes-1", "here"}


def test_every_docs_reference_resolves() -> None:
    broken, checked = broken_references(ROOT)
    assert checked >= 20, f"only {checked} references found: is the scanner reading the repository?"
    assert not broken, "references to missing pages or headings:\n" + "\n".join(broken)


def test_every_relative_markdown_link_resolves() -> None:
    broken, checked = broken_links(ROOT)
    assert checked >= 1, "no relative link found: is the scanner reading the docs?"
    assert not broken, "markdown links that do not resolve:\n" + "\n".join(broken)


def test_upstream_paths_are_not_pages_of_ours() -> None:
    """A page of ours under an upstream name would make its citations ambiguous."""
    assert not [p for p in UPSTREAM if (ROOT / p).exists()]


D = "docs"  # spelled apart below, so that this file's examples of broken references are not read as ones


@pytest.mark.parametrize("text, problem", [
    (f"see ``{D}/no-such-page.md``", "no such page"),
    (f"see ``{D}/anchors.md#no-such-heading``", "no heading with that anchor"),
    ("see [x](anchors.md#no-such-heading)", "no heading with that anchor"),
    ("see [x](missing.md)", "no such file"),
    ("see [x](../../outside.md)", "outside the repository"),
])
def test_a_broken_reference_is_reported(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "anchors.md").write_text("# Anchors\n\n## KEDA\n")
    (tmp_path / "docs" / "page.md").write_text(f"# Page\n\n{text}\n\n```\n[ok](ignored-in-code.md)\n```\n")
    (tmp_path / "README.md").write_text(f"# Readme\n\n[page]({D}/page.md) ``{D}/anchors.md#keda``\n")
    found = broken_references(tmp_path)[0] + broken_links(tmp_path)[0]
    assert len(found) == 1 and problem in found[0], found


def test_the_readme_tour_never_overwrites_the_first_command_s_outputs() -> None:
    """README's first command writes ``out/`` (timeline.png among its files); ``simulate``, ``compare`` and
    ``backtest`` write under ``--out`` (default ``out``) and remove their own earlier files there first, so a
    tour line without an ``--out`` of its own would delete what the first command wrote."""
    tour = (ROOT / "README.md").read_text().split("## A tour", 1)[1].split("```", 2)[1]
    writers = [ln for ln in tour.splitlines() if re.match(r"autoscaler (simulate|compare|backtest)\b", ln)]
    assert len(writers) >= 6, "the tour's commands were not found: is the parser reading README?"
    for line in writers:
        command = line.split("  #")[0].split()
        assert "--out" in command, f"a tour line writes into out/: {line}"
        assert command[command.index("--out") + 1] not in ("out", "out/"), line
