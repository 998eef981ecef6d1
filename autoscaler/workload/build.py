"""The workload of a run: a trace (or the embedded synthetic day) with classes, workflows and rate shaping."""

from __future__ import annotations

from pathlib import Path

from autoscaler.workload.classes import assign_classes, group_workflows
from autoscaler.workload.loader import load_trace
from autoscaler.workload.shaping import shape
from autoscaler.workload.synthetic import synthetic_workload
from autoscaler.workload.types import Workload

# The embedded default workload's mean rate, about 18 x Azure conv's measured 5.53 req/s, so that the
# example fleet scales over ~4-10 replicas (``models.capacity``).
EMBEDDED_RATE_RPS = 100.0
# ... and its rate curve runs at the speed of a real day (one hour of it, from the daily trough), not
# a day compressed into the hour: 24x faster swings than real traffic would make every reactive
# policy with 90-300 s replica starts look worse than it is.
EMBEDDED_DAY_S = 86400.0
DEFAULT_BATCH_FRACTION = 0.2  # share of trace requests (workflows) in the batch class, an assumption


def build_workload(
    trace: Path | None,
    trace_format: str | None = None,
    rate_scale: float = 1.0,
    time_scale: float = 1.0,
    seed: int = 0,
    batch_fraction: float = DEFAULT_BATCH_FRACTION,
) -> Workload:
    """Load (or synthesise) the workload, assign classes and workflows, and shape its rate.

    Args:
        trace: an Azure CSV or Mooncake JSONL; None for the embedded synthetic workload.
        trace_format: ``azure`` | ``mooncake``; None detects it from the file.
        rate_scale: thin (< 1) or superpose jittered copies (> 1).
        time_scale: multiply arrival times.
        seed: for class assignment, shaping and the synthetic workload.
        batch_fraction: share of workflows in the batch class.

    Raises:
        TraceError: a malformed trace.
        ValueError: bad shaping arguments, or no request left after shaping.
    """
    if trace is None:
        wl = synthetic_workload(seed=seed, mean_rate_rps=EMBEDDED_RATE_RPS, day_s=EMBEDDED_DAY_S,
                                batch_fraction=batch_fraction)
    else:
        wl = group_workflows(load_trace(trace, trace_format))
        wl = assign_classes(wl, batch_fraction=batch_fraction, seed=seed)
    if rate_scale != 1.0 or time_scale != 1.0:
        wl = shape(wl, time_scale=time_scale, rate_scale=rate_scale, seed=seed)
    if not wl.requests:
        where = "the trace" if trace is not None else "the synthetic workload"
        raise ValueError(f"no requests left in {where} after --rate-scale {rate_scale:g}")
    return wl
