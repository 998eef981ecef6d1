"""The simulator behind the loop's interfaces: a ``MetricsSource`` and an ``Actuator``.

``SimMetricsSource`` computes each signal the way the PromQL defaults do over the replicas'
vLLM metrics: ``rate()`` of counters, ``histogram_quantile()`` of bucket increments and
``rate(_sum) / rate(_count)`` means over the last ``window_s`` seconds, gauges summed (queue,
running) or averaged (KV usage) over pods.
Per-pod gauges are also sampled at every ``scrape`` (and every ``observe``), as Prometheus samples
them at each scrape, so ``max_over_time(gauge[window_s])`` is the largest sample in
``(now - window_s, now]``.
"""

from __future__ import annotations

from collections import deque

from autoscaler.loop.actuate import APPLIED, ActuationResult
from autoscaler.simulator.engine import DRAINING, READY, Replica
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.metrics import ITL_BUCKETS, TTFT_BUCKETS, histogram_quantile
from autoscaler.state import PodObservation, ServiceObservation, VariantObservation


class SimMetricsSource:
    """Signals of a ``FleetSimulator``'s services, as a Prometheus scraping every pod would report."""

    def __init__(self, sim: FleetSimulator, window_s: float) -> None:
        self.sim = sim
        self.window_s = window_s
        self._history: dict[int, deque[tuple[float, dict[str, object]]]] = {}
        self._gauges: dict[int, deque[tuple[float, float, float]]] = {}

    def scrape(self, now: float) -> None:
        """Record one sample of every ready pod's KV-usage and waiting gauges at ``now`` (seconds)."""
        for svc in self.sim.services.values():
            for r in svc.ready:
                r.refresh_gauges()
                hist = self._gauges.setdefault(r.rid, deque())
                if not hist or hist[-1][0] < now:
                    hist.append((now, r.metrics.kv_usage, float(r.metrics.waiting)))
                while hist[0][0] <= now - self.window_s:
                    hist.popleft()

    def _pods(self, service: str, ready: list[Replica]) -> list[PodObservation]:
        """Latest and window-max gauges and prefix-cache counters of ``ready`` pods (call after ``scrape``).

        Pods are named as the exposition names them (``<service>-<variant>-<replica id>``).
        """
        out = []
        for r in ready:
            hist = self._gauges[r.rid]
            out.append(PodObservation(
                variant=r.variant,
                kv_usage=r.metrics.kv_usage,
                waiting=float(r.metrics.waiting),
                running=float(r.metrics.running),
                kv_usage_max=max(h[1] for h in hist),
                waiting_max=max(h[2] for h in hist),
                name=f"{service}-{r.variant}-{r.rid}",
                prefix_hits_total=r.metrics.prefix_hits,
                prefix_queries_total=r.metrics.prefix_queries,
                ready_s=r.ready_s,
            ))
        return out

    def _window_delta(self, r: Replica, now: float) -> tuple[dict[str, object], dict[str, object], float]:
        """(snapshot now, the last snapshot at or before the window start, seconds between them).

        A pod exports metrics once it is ready (its server starts after the weights load), with its
        counters at zero, so its history starts with an empty snapshot at ``ready_s``: a young pod's
        rates are over the time it has served, not over its provisioning time too.
        """
        snap = r.metrics.snapshot()
        hist = self._history.setdefault(r.rid, deque([(r.ready_s, {})]))
        hist.append((now, snap))
        while len(hist) > 2 and hist[1][0] <= now - self.window_s:
            hist.popleft()
        t0, old = hist[0]
        return snap, old, max(now - t0, 1e-9)

    def _signals(self, pods: list[tuple[Replica, dict[str, object], dict[str, object], float]],
                 ) -> dict[str, float | None]:
        if not pods:
            return dict.fromkeys(
                ("request_rate_rps", "prompt_tokens_rps", "generation_tokens_rps", "ttft_p50_s",
                 "ttft_p95_s", "itl_p50_s", "itl_p95_s", "tpot_p95_s", "ttft_mean_s", "tpot_mean_s", "kv_usage",
                 "queue_length", "running",
                 "prefix_hit_rate", "success_rps", "abort_rps", "preemptions_rps"))

        def rate(key: str) -> float:
            return sum((float(new[key]) - float(old.get(key, 0.0))) / dt  # type: ignore[arg-type]
                       for _, new, old, dt in pods)

        def buckets(key: str, n: int) -> list[float]:
            acc = [0.0] * n
            for _, new, old, _dt in pods:
                o = old.get(key) or [0.0] * n
                for i, (a, b) in enumerate(zip(new[key], o, strict=True)):  # type: ignore[call-overload]
                    acc[i] += a - b
            return acc

        def mean(key: str) -> float | None:
            n = rate(f"{key}_count")
            return rate(f"{key}_sum") / n if n > 0 else None

        ttft = buckets("ttft", len(TTFT_BUCKETS) + 1)
        itl = buckets("itl", len(ITL_BUCKETS) + 1)
        tpot = buckets("tpot", len(ITL_BUCKETS) + 1)
        queries = rate("prefix_queries")
        serving = [r for r, *_ in pods if r.state in (READY, DRAINING)]
        return {
            "request_rate_rps": rate("e2e_count"),
            "prompt_tokens_rps": rate("prompt_tokens"),
            "generation_tokens_rps": rate("generation_tokens"),
            "ttft_p50_s": histogram_quantile(0.5, TTFT_BUCKETS, ttft),
            "ttft_p95_s": histogram_quantile(0.95, TTFT_BUCKETS, ttft),
            "itl_p50_s": histogram_quantile(0.5, ITL_BUCKETS, itl),
            "itl_p95_s": histogram_quantile(0.95, ITL_BUCKETS, itl),
            "tpot_p95_s": histogram_quantile(0.95, ITL_BUCKETS, tpot),
            "ttft_mean_s": mean("ttft"),
            "tpot_mean_s": mean("tpot"),
            "kv_usage": (sum(r.metrics.kv_usage for r in serving) / len(serving)) if serving else None,
            "queue_length": float(sum(r.metrics.waiting for r in serving)),
            "running": float(sum(r.metrics.running for r in serving)),
            "prefix_hit_rate": rate("prefix_hits") / queries if queries > 0 else None,
            "success_rps": rate("success"),
            "abort_rps": rate("aborts"),
            "preemptions_rps": rate("preemptions"),
        }

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        """Signals of every service at ``now`` (seconds)."""
        out: dict[str, ServiceObservation] = {}
        seen: set[int] = set()
        self.scrape(now)
        for name, svc in self.sim.services.items():
            pods = []
            for r in svc.replicas:
                if r.state not in (READY, DRAINING):
                    continue
                r.refresh_gauges()
                seen.add(r.rid)
                pods.append((r, *self._window_delta(r, now)))
            variants = {}
            for vname in svc.variants:
                c = svc.counts(vname)
                vpods = [p for p in pods if p[0].variant == vname]
                variants[vname] = VariantObservation(c.ready, c.starting, c.draining, self._signals(vpods))
            signals = self._signals(pods)
            if not pods:
                # No pod serving: no traffic can be measured, but none is in flight on a pod either.
                signals.update(request_rate_rps=0.0, queue_length=float(len(svc.gateway)), running=0.0)
            else:
                signals["queue_length"] = (signals["queue_length"] or 0.0) + len(svc.gateway)
            out[name] = ServiceObservation(name, now, signals, variants, pods=self._pods(name, svc.ready))
        for rid in self._history.keys() - seen:
            del self._history[rid]
        for rid in self._gauges.keys() - seen:
            del self._gauges[rid]
        return out


class SimActuator:
    """Scales the simulator's Deployments (every write applies: the simulator has no API server)."""

    def __init__(self, sim: FleetSimulator) -> None:
        self.sim = sim

    def scale(self, service: str, variant: str, replicas: int) -> ActuationResult:
        """Set the variant's replicas."""
        self.sim.set_replicas(service, variant, replicas)
        return APPLIED
