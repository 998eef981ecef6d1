"""Benchmark: where the fleet simulator's time goes, per request: its events by kind and each engine step's work.

Runs the Azure LLM inference 2023 conv trace through ``benchmarks/sim_throughput.py``'s code path
(``run_simulation``, PID controller, example fleet, ``keep_requests=False``) three times in one
process: once to fill the capacity memo (as that benchmark's later runs), once with counters
wrapped around the engine's entry points (a run's events by kind, each divided by the requests), and
once under cProfile with a CPU-time timer (``time.process_time``; the top ``--top`` functions by
own time and by cumulative time). The counted run's outputs are the plain run's: the wrappers only
count (``Replica.on_step_end``, ``Replica._interrupt``, ``Replica.enqueue``, ``FleetSimulator.push_step``).

What is counted, per request: ``step_ends`` (engine steps and decode runs ended), of them
``prefill_steps`` (a step carrying prefill chunks, with ``chunks``, and the decoding sequences it
also advanced, ``decodes_in_prefill_steps``) and ``decode_runs`` (a run of decode-only steps
simulated as one event: ``decode_run_steps`` steps, ``decode_run_sequence_steps`` sequence-steps);
``step_pushes`` (step events put on the event heap; those beyond ``step_ends`` were superseded:
``runs_cut``, a decode run ended early at the step boundary after an arrival); ``enqueues`` (routed
requests), of them ``enqueues_in_decode_run`` (the replica was in a decode run).

    python benchmarks/sim_throughput.py ... ; python benchmarks/sim_events.py [--data ../shared/data]
        [--rate-scale 100] [--span 0:120] [--top 25] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoscaler.config.loading import load_config
from autoscaler.simulate import run_simulation
from autoscaler.simulator.engine import Replica, SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.build import build_workload, parse_span

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]


def counting(counts: Counter[str]) -> list[tuple[type, str, Callable[..., Any]]]:
    """Wrap the engine's entry points to count into ``counts``; returns (class, name, original) to restore."""
    originals: list[tuple[type, str, Callable[..., Any]]] = []

    def wrap(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        orig = getattr(cls, name)
        originals.append((cls, name, orig))
        setattr(cls, name, make(orig))

    def on_step_end(orig: Callable[..., Any]) -> Callable[..., Any]:
        def f(self: Replica, now: float, version: int) -> None:
            step = self._step
            if step is not None and version == self._version:
                _, k, _, _, n, _, chunks = step
                counts["step_ends"] += 1
                if chunks is None:
                    counts["decode_runs"] += 1
                    counts["decode_run_steps"] += k
                    counts["decode_run_sequence_steps"] += k * n
                else:
                    counts["prefill_steps"] += 1
                    counts["chunks"] += len(chunks)
                    counts["decodes_in_prefill_steps"] += n
            orig(self, now, version)
        return f

    def interrupt(orig: Callable[..., Any]) -> Callable[..., Any]:
        def f(self: Replica, now: float) -> None:
            version = self._version
            orig(self, now)
            counts["runs_cut"] += self._version != version
        return f

    def enqueue(orig: Callable[..., Any]) -> Callable[..., Any]:
        def f(self: Replica, sr: SimRequest, now: float) -> None:
            counts["enqueues"] += 1
            counts["enqueues_in_decode_run"] += bool(self.busy and self._step is not None and self._step[6] is None)
            orig(self, sr, now)
        return f

    def push_step(orig: Callable[..., Any]) -> Callable[..., Any]:
        def f(self: FleetSimulator, t: float, replica: Replica, version: int) -> None:
            counts["step_pushes"] += 1
            orig(self, t, replica, version)
        return f

    wrap(Replica, "on_step_end", on_step_end)
    wrap(Replica, "_interrupt", interrupt)
    wrap(Replica, "enqueue", enqueue)
    wrap(FleetSimulator, "push_step", push_step)
    return originals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="folder holding azure-llm-2023/AzureLLMInferenceTrace_conv.csv")
    ap.add_argument("--rate-scale", type=float, default=100.0, help="rate scale of the trace")
    ap.add_argument("--span", default="0:120", metavar="START:END",
                    help="only the trace's arrivals in this span, seconds ('' for the whole trace)")
    ap.add_argument("--top", type=int, default=25, help="functions listed from the profile, by own and cumulative time")
    ap.add_argument("--json", action="store_true", help="print the counts as one JSON object, no profile")
    args = ap.parse_args()
    print(f"{Path(__file__).name}: {stamp()}", file=sys.stderr if args.json else sys.stdout, flush=True)
    trace = args.data / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    cfg = load_config(ROOT / "examples" / "fleet.yaml")
    try:
        span = parse_span(args.span) if args.span else None
    except ValueError as exc:
        ap.error(str(exc))
    wl = build_workload(trace, None, args.rate_scale, 1.0, 0, 0.2, span=span)
    n = len(wl.requests)
    c = time.process_time()
    run_simulation(cfg, wl, "pid", keep_requests=False)  # fills the capacity memo, as the benchmark's later runs
    plain = time.process_time() - c
    counts: Counter[str] = Counter()
    originals = counting(counts)
    try:
        run_simulation(cfg, wl, "pid", keep_requests=False)
    finally:
        for cls, name, orig in originals:
            setattr(cls, name, orig)
    row: dict[str, object] = {"trace": trace.name + (f" {args.span}" if args.span else ""),
                              "rate_scale": args.rate_scale, "requests": n, "first_run_cpu_s": plain}
    row.update({k: counts[k] for k in sorted(counts)})
    row.update({f"{k}_per_request": counts[k] / n for k in sorted(counts)})
    if args.json:
        print(json.dumps(row))
        return
    print(f"{row['trace']} x{args.rate_scale:g}: {n} requests, first run {plain:.2f} s CPU")
    for k in sorted(counts):
        print(f"  {k:28s} {counts[k]:>10,d}  {counts[k] / n:8.3f} a request")
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    run_simulation(cfg, wl, "pid", keep_requests=False)
    prof.disable()
    for key in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip()))


if __name__ == "__main__":
    main()
