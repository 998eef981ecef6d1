"""The timeline figure of a small simulated run, read back from its matplotlib objects."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from autoscaler import plot
from autoscaler.config import FleetConfig
from autoscaler.config.loading import default_config, load_config
from autoscaler.report import summarize, timeline_rows, write_outputs
from autoscaler.simulate import SimulationRun, run_simulation
from autoscaler.workload.types import BATCH, INTERACTIVE, Request, Workload

PHASES = ((5.0, 360.0), (30.0, 300.0))  # (requests/s, seconds): evenly spaced, none on a 15-s tick


@pytest.fixture(scope="module")
def run() -> SimulationRun:
    # The fleet starts sized for 5 req/s; at 30 the PID scales it up.
    reqs, start = [], 0.0
    for rate, span in PHASES:
        reqs += [Request(arrival_s=start + (i + 0.5) / rate, input_tokens=2000, output_tokens=200,
                         request_class=BATCH if i % 4 == 0 else INTERACTIVE) for i in range(int(rate * span))]
        start += span
    return run_simulation(default_config(), Workload(reqs, source="test:step"), "pid")


@pytest.fixture(scope="module")
def figure(run: SimulationRun) -> Any:
    fig = plot.timeline_figure(run.sim.cfg, run.sim.target, "pid: test", timeline_rows(run), summarize(run),
                               run.sim.last_arrival_s)
    yield fig
    plt.close(fig)


def _lines(fig: Figure, panel: int) -> list[Line2D]:
    return list(fig.axes[panel].get_lines())


def test_the_title_gives_attainment_per_class_and_cost_as_results_has_them(run: SimulationRun, figure: Any) -> None:
    res = summarize(run)
    title = figure.axes[0].get_title()
    assert set(res["slo_attainment"]) == {"interactive", "batch", "all"}
    for cls, value in res["slo_attainment"].items():
        assert f"{cls} {100 * value:.2f} %" in title
    assert f"{res['gpu_hours']['total']:.2f} GPU-h, ${res['cost_usd']['total']:.2f}" in title


def test_a_marker_per_scale_decision(run: SimulationRun, figure: Any) -> None:
    rows = timeline_rows(run)
    names = [v.name for v in run.sim.cfg.services[0].variants]
    ups = sum(r[f"desired_{v}"] > p[f"desired_{v}"] for p, r in itertools.pairwise(rows) for v in names)
    downs = sum(r[f"desired_{v}"] < p[f"desired_{v}"] for p, r in itertools.pairwise(rows) for v in names)
    assert ups >= 2
    marked = {kind: sum(len(ln.get_xdata()) for ln in _lines(figure, 1) if ln.get_gid() == f"scale-{kind}")
              for kind in ("up", "down")}
    assert marked == {"up": ups, "down": downs}


def test_latencies_are_over_their_own_slo_with_one_slo_line(run: SimulationRun, figure: Any) -> None:
    slo = run.sim.cfg.services[0].slo["interactive"]
    rows = timeline_rows(run)
    ttft, itl, line = _lines(figure, 2)
    def over(key: str, objective: float) -> list[float]:
        return [math.nan if r[key] is None else r[key] / objective for r in rows]  # None: not measured yet

    assert list(ttft.get_ydata()) == pytest.approx(over("ttft_p95_s", slo.ttft_s), nan_ok=True)
    assert list(itl.get_ydata()) == pytest.approx(over("tpot_p95_s", slo.itl_s), nan_ok=True)
    assert list(line.get_ydata()) == [1.0, 1.0] and line.get_label() == "SLO"
    assert figure.axes[2].get_ylabel() == "latency / SLO (1 = SLO)"


def test_labels_name_what_is_drawn_with_a_unit_and_one_word_for_the_per_token_latency(figure: Any) -> None:
    labels = [ax.get_ylabel() for ax in figure.axes] + [figure.axes[-1].get_xlabel()]
    assert labels[:3] == ["arrivals over each tick (req/s)", "replicas", "latency / SLO (1 = SLO)"]
    assert labels[3].replace("\n", " ") == "mean latency / SLO, the worse of TTFT and ITL (1 = SLO)"
    assert labels[4] == "time (min)"
    legends = [t.get_text() for ax in figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert not any("_" in text for text in labels + legends)
    assert not any("TPOT" in text for text in legends) and any("ITL" in text for text in legends)


def test_no_arrival_rate_past_the_last_arrival(run: SimulationRun, figure: Any) -> None:
    rows = timeline_rows(run)
    # The run ticks on after the last arrival while the last requests finish: the CSV's 0 req/s there.
    assert rows[-1]["time_s"] - 15.0 >= run.sim.last_arrival_s and rows[-1]["arrival_rate_rps"] == 0.0
    drawn = list(_lines(figure, 0)[0].get_ydata())
    assert math.isnan(drawn[-1])
    # Every 15-s tick within the workload holds 75 or 450 of its arrivals: 5 or 30 req/s, the last one too.
    end = sum(span for _, span in PHASES)
    within = [(r["time_s"], y) for r, y in zip(rows, drawn, strict=True) if r["time_s"] <= end]
    assert within[-1][0] == end
    assert [y for _, y in within] == pytest.approx([PHASES[0][0] if t <= PHASES[0][1] else PHASES[1][0]
                                                    for t, _ in within])


def test_simulate_plot_passes_the_results_and_the_last_arrival(run: SimulationRun, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def record(cfg: FleetConfig, service: str, title: str, rows: list[dict[str, Any]], path: Path,
               results: dict[str, Any] | None = None, arrivals_until_s: float | None = None) -> None:
        seen.update(results=results, until=arrivals_until_s)

    monkeypatch.setattr(plot, "plot_timeline", record)
    res = write_outputs(run, tmp_path, plot=True)
    assert seen == {"results": res, "until": run.sim.last_arrival_s}


def test_a_service_of_prefill_decode_pools_only_is_plotted(tmp_path: Path) -> None:
    # examples/fleet-pd.yaml's shape: no aggregated variant (matplotlib's stackplot of no series raised
    # "need at least one array to concatenate", and `simulate --plot` and `compare` ended with that after
    # the simulation). The figure is written.
    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "fleet-pd.yaml")
    wl = Workload([Request(arrival_s=1.0 * i, input_tokens=3000 if i % 2 else 300, output_tokens=20)
                   for i in range(60)], source="test:pd")
    run = run_simulation(cfg, wl, "pid")
    path = tmp_path / "timeline.png"
    plot.plot_timeline(run.sim.cfg, run.sim.target, "pid: pd", timeline_rows(run), path)
    assert path.stat().st_size > 0
    fig = plot.timeline_figure(run.sim.cfg, run.sim.target, "pid: pd", timeline_rows(run), summarize(run),
                               run.sim.last_arrival_s)
    # The pools are drawn as variants are (the PID scales them; the timeline has their columns): one
    # stacked area per pool variant and the total from its 1 prefill + 2 decode replicas. No plan line:
    # the PID plans nothing (before, a line of 0 replicas "planned 2 ticks before" and no stack).
    assert len(fig.axes[1].collections) == 2
    assert [h.get_label() for h in fig.axes[1].get_legend_handles_labels()[0]] == \
        ["h100-prefill ready", "h100-decode ready", "ready + starting"]
    total = next(line for line in fig.axes[1].get_lines() if line.get_label() == "ready + starting")
    assert total.get_ydata()[0] == 3  # type: ignore[index]
    plt.close(fig)
