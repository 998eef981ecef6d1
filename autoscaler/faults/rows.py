"""The fault suite's rows and their table (``autoscaler faults run``'s output)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoscaler.faults.scenario import Scenario
from autoscaler.files import write_text
from autoscaler.formats import money, percent
from autoscaler.workload.types import INTERACTIVE

ROW_KEYS = ("scenario", "controller", "harmful_actions", "slo_attainment_interactive", "requests_failed",
            "retries", "cost_usd")


def make_row(sc: Scenario, name: str, summary: dict[str, Any], harm: dict[str, int],
             crashes: list[tuple[float, int, int]] | None = None,
             pace: dict[str, Any] | None = None, pace_failed: str | None = None) -> dict[str, Any]:
    """The row of ``name`` on ``sc`` from a run's ``results.json`` document and its harm counts.

    ``crashes``: each ``crash`` fault as applied, ``(time s, replicas crashed, requests failed)``
    (``autoscaler.faults.inject.Injector.crashed``): a crash that found no ready replica shows as 0
    replicas. None where the layer does not record them (live rows): the row's ``crashes`` is null.
    ``pace``: the pace a live row's fleet kept (``autoscaler.faults.pace.pace_figures``: ``{target_x,
    kept, lowest, window_s, starved}``); None (null) in simulator rows, which run unpaced, and where
    it could not be measured. ``pace_failed``: why a live row's pace could not be read (one line),
    under that key beside the row's results; the key is absent otherwise.
    """
    row: dict[str, Any] = {
        "scenario": sc.name,
        "controller": name,
        "harmful_actions": sum(harm.values()),
        "slo_attainment_interactive": summary["slo_attainment"][INTERACTIVE],
        "requests_failed": summary["requests"]["failed"],
        "retries": summary["admission"]["retries"],
        "cost_usd": summary["cost_usd"]["total"],
        "harm": harm,
        "crashes": None if crashes is None else [
            {"time_s": t, "replicas": n, "requests_failed": f} for t, n, f in crashes],
        "layer": sc.layer,
        "reported": sc.reported,
        "seed": sc.seed,
        "wall_s": summary["wall_s"],
        "pace": pace,
    }
    if pace_failed is not None:
        row["pace_failed"] = pace_failed
    return row


def failed_row(sc: Scenario, name: str, exc: BaseException, wall_s: float) -> dict[str, Any]:
    """The row of ``name`` on ``sc`` whose run raised ``exc`` (or whose worker died): the error in one
    line under ``failed``, every figure null (never 0: nothing was measured)."""
    return {
        "scenario": sc.name,
        "controller": name,
        "failed": " ".join(f"{type(exc).__name__}: {exc}".split()),
        "harmful_actions": None,
        "slo_attainment_interactive": None,
        "requests_failed": None,
        "retries": None,
        "cost_usd": None,
        "harm": {},
        "crashes": None,
        "layer": sc.layer,
        "reported": sc.reported,
        "seed": sc.seed,
        "wall_s": wall_s,
        "pace": None,
    }


def not_applicable_row(sc: Scenario, name: str, why: str) -> dict[str, Any]:
    """The row of ``name`` on ``sc`` when the controller cannot run on the scenario's fleet (one that
    needs aggregated variants on a fleet of prefill/decode pools only, or the reverse): not run, the
    reason under ``not_applicable``, every figure null. Not a failure: the command still exits 0."""
    row = failed_row(sc, name, ValueError(why), 0.0)
    del row["failed"]
    return {**row, "not_applicable": why}


def failed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose run failed."""
    return [r for r in rows if r.get("failed")]


def starved(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live rows whose fleet fell below ``STARVED_FRACTION`` of its pace (``autoscaler.faults.pace``):
    their attainment is not evidence."""
    return [r for r in rows if (r.get("pace") or {}).get("starved")]


def _cell(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def pace_cell(pace: dict[str, Any] | None) -> str:
    """A row's pace as the table writes it: ``kept / lowest`` as fractions of the target, two
    decimals, ``starved`` after them when it is; ``-`` without one."""
    if pace is None:
        return "-"
    return f"{pace['kept']:.2f} / {pace['lowest']:.2f}" + (" starved" if pace["starved"] else "")


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as one Markdown table: scenario x controller -> harm (by rule), attainment, failed,
    retries, cost (money and shares as every table writes them: ``autoscaler.formats``), and a last
    column ``pace`` (``pace_cell``; ``not measured`` where ``pace_failed``) when a row has one (a live row).
    A not-applicable row's cell reads ``n/a [k]``; each distinct reason is written once, as a list item
    ``- n/a [k]: <reason>`` after the table and a blank line."""
    paced = any(r.get("pace") is not None or r.get("pace_failed") for r in rows)
    reasons: dict[str, int] = {}  # each distinct not-applicable reason -> its footnote number, in order met
    head = "| scenario | controller | harmful actions | interactive SLO | failed | retries | cost |"
    lines = [head + (" pace (kept / lowest) |" if paced else ""),
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|" if paced else "")]
    for r in rows:
        parts = [f"{k} {v}" for k, v in r["harm"].items() if v]
        if r.get("not_applicable") and not r.get("failed"):
            reasons.setdefault(r["not_applicable"], len(reasons) + 1)
        harm = (f"failed: {r['failed']}" if r.get("failed") else f"n/a [{reasons[r['not_applicable']]}]"
                if r.get("not_applicable") else f"{r['harmful_actions']}" + (f" ({', '.join(parts)})" if parts else ""))
        lines.append(f"| {r['scenario']} | {r['controller']} | {harm} | "
                     f"{percent(r['slo_attainment_interactive'])} | "
                     f"{_cell(r['requests_failed'], 'd')} | {_cell(r['retries'], 'd')} | {money(r['cost_usd'])} |"
                     + (f" {'not measured' if r.get('pace_failed') else pace_cell(r.get('pace'))} |"
                        if paced else ""))
    if reasons:  # each reason once, under the table (a cell would repeat it on every row it applies to)
        lines.append("")
        lines.extend(f"- n/a [{n}]: {why}" for why, n in reasons.items())
    return "\n".join(lines)


OUTPUTS = ("faults.json", "faults.md")
"""The files ``write_results`` writes under ``--out``."""


def write_results(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Write ``faults.json`` (the rows) and ``faults.md`` (the table) under ``out``; returns the paths.

    Raises:
        OSError: the directory cannot be created or written.
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in OUTPUTS]
    write_text(paths[0], json.dumps(list(rows), indent=2) + "\n")
    write_text(paths[1], markdown_table(rows) + "\n")
    return paths
