"""A small two-variant fleet and a 450-s ramp shared by the tests that run the simulator served in
scaled real time beside a real Prometheus (dry-run, backtest, the daemon, the exporter, the dashboards)."""

from __future__ import annotations

from typing import Any

import numpy as np

from autoscaler.workload.types import Request, Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def _variant(name: str, gpu: str, profile: str, price: float, lo: int, start: int) -> dict[str, Any]:
    return {"name": name, "gpu": gpu, "price_per_gpu_hour": price, "min_replicas": lo, "max_replicas": 8,
            "initial_replicas": start, "startup_cold_s": 30, "startup_warm_s": 30, "kv_cache_tokens": 400_000,
            "profile": profile}


FLEET_DOC: dict[str, Any] = {
    "services": [{"name": "llm", "model": "m", "slo": SLO, "variants": [
        _variant("h100", "H100-SXM", "llama-3-8b/h100-sxm", 2.99, 0, 0),
        _variant("a100", "A100-80GB", "llama-3-8b/a100-80gb", 1.79, 1, 1)]}],
    # The default signal (slo_mean_ratio) on a 60-s window, so a 450-s run scales up and down. No drain
    # before removal: the live paths compared with this simulation (dry-run, backtest, the daemon) have
    # no drainer, and a drain delays the simulator's writes, not its decisions.
    "controller": {"tick_s": 15, "window_s": 60,
                   "guard": {"scale_down_cooldown_s": 60, "idle_ticks_to_min": 4, "drain_timeout_s": 0}},
    # Two A100 replicas (the PID serves this ramp on A100s alone) crash at the peak: the survivors are
    # overloaded until replacements are ready, and the PID's overload rule (arrivals from completions and
    # queue growth) sizes the fleet.
    "simulator": {"crashes": [{"time_s": 235, "variant": "a100"}, {"time_s": 236, "variant": "a100"}],
                  "scrape_interval_s": 5},
}


def ramp(seed: int = 0) -> Workload:
    """Poisson arrivals: 6 req/s, up to 30 req/s from 80 to 200 s, down to 4 req/s from 300 to 380 s; 450 s."""
    def rate(t: float) -> float:
        if t < 80:
            return 6.0
        if t < 200:
            return 6.0 + 24.0 * (t - 80) / 120
        if t < 300:
            return 30.0
        return max(4.0, 30.0 - 26.0 * (t - 300) / 80)

    rng = np.random.default_rng(seed)
    reqs, t = [], 0.0
    while True:
        t += rng.exponential(1 / rate(t))
        if t >= 450:
            return Workload(reqs, source="ramp")
        reqs.append(Request(t, int(rng.integers(500, 1500)), int(rng.integers(50, 300))))
