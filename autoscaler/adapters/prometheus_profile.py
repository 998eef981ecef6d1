"""Busy windows of live vLLM pods, read from a Prometheus range, as rows for ``models.profiles.measured``.

For every pod the selector matches and every ``window_s`` window of ``[start, end]`` (range
queries at step ``window_s``, so the windows do not overlap), vLLM 0.33's own series give:

- steps: ``increase(vllm:iteration_tokens_total_count[w])`` (one observation per engine step);
- prompt tokens prefilled: ``increase(vllm:prompt_tokens_total[w])`` less
  ``increase(vllm:prefix_cache_hits_total[w])`` (cached tokens are not computed);
- decode sequence-steps: ``increase(vllm:inter_token_latency_seconds_count[w])`` (one observation
  per sequence per decode step);
- attention pairs of the prefill: as if each of the window's prefills
  (``increase(vllm:time_to_first_token_seconds_count[w])``) were its mean one, uncached tokens after
  cached ones (low by E[L^2] / E[L]^2 for prompts of mixed lengths: the term is a few percent of
  the prefill's);
- KV context read by them: decode sequence-steps x the mean KV tokens per running request,
  ``avg_over_time(vllm:kv_cache_usage_perc[w])`` x the pool (``num_gpu_blocks`` x ``block_size``
  of ``vllm:cache_config_info``, summed over the pod's engines: ``pool_tokens``) /
  ``avg_over_time(vllm:num_requests_running[w])``. A prefilling
  request holds about its prompt, a decoding one prompt + output so far: a few percent high when
  prefills are a large share of the batch.

Only windows in which the pod was busy throughout are rows (``min_over_time(running[w]) >= 1``,
and at least one step): then the steps' times add up to the window. Series are summed over
``engine`` per pod (``pod_label``, default ``pod``). A failed query is an error, never a zero.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import numpy as np
from prometheus_api_client import PrometheusConnect

from autoscaler.adapters.prometheus import PrometheusError, describe
from autoscaler.promql import duration
from autoscaler.urls import redact
from models.profiles import prefill_pairs
from models.profiles.measured import Rows

QUERIES: dict[str, str] = {
    "steps": "sum by ($pod) (increase(vllm:iteration_tokens_total_count{$sel}[$w]))",
    "prompt": "sum by ($pod) (increase(vllm:prompt_tokens_total{$sel}[$w]))",
    "hits": "sum by ($pod) (increase(vllm:prefix_cache_hits_total{$sel}[$w]))",
    "decode": "sum by ($pod) (increase(vllm:inter_token_latency_seconds_count{$sel}[$w]))",
    "prefills": "sum by ($pod) (increase(vllm:time_to_first_token_seconds_count{$sel}[$w]))",
    "ctx": "sum by ($pod) (sum_over_time((rate(vllm:inter_token_latency_seconds_count{$sel}[$r2])"
           " * vllm:kv_cache_usage_perc{$sel} / vllm:num_requests_running{$sel})[$w:$r])) * $rs",
    "running_min": "sum by ($pod) (min_over_time(vllm:num_requests_running{$sel}[$w]))",
}
"""Name -> PromQL template (``$sel`` the matchers, ``$w`` the window, ``$pod`` the pod label)."""
OPTIONAL = ("hits",)
"""Queries whose absence (no series: prefix caching off) reads as zero hits."""
CACHE_CONFIG = "vllm:cache_config_info"


def _render(template: str, sel: str, window_s: float, resolution_s: float, pod_label: str) -> str:
    return (template.replace("$sel", sel).replace("$w", duration(window_s)).replace("$r2", duration(2 * resolution_s))
            .replace("$rs", f"{resolution_s:g}").replace("$r", duration(resolution_s)).replace("$pod", pod_label))


def _by_pod(result: list[dict[str, Any]], pod_label: str) -> dict[str, dict[float, float]]:
    return {r["metric"].get(pod_label, ""): {float(t): float(v) for t, v in r["values"]} for r in result}


def pool_query(sel: str, pod_label: str) -> str:
    """The instant query of every selected pod's ``vllm:cache_config_info`` series.

    vLLM labels them with the CacheConfig's fields and ``engine``, not ``model_name`` (vLLM 0.33
    ``vllm/v1/metrics/loggers.py``), so a selector on the model finds none: the pods are those whose
    ``num_requests_running`` the selector matches, joined on the pod label.
    """
    return (f"max by ({pod_label}, engine, num_gpu_blocks, block_size) (last_over_time({CACHE_CONFIG}[1h]) "
            f"and on ({pod_label}) group by ({pod_label}) (last_over_time(vllm:num_requests_running{{{sel}}}[1h])))")


def pool_tokens(client: PrometheusConnect, sel: str, at: float, pod_label: str) -> dict[str, float]:
    """Each pod's KV pool, tokens: ``num_gpu_blocks`` x ``block_size`` of its ``vllm:cache_config_info``
    (``pool_query``), summed over its engines (a data-parallel pod runs one per rank, each with its own
    pool); an engine whose config changed within the hour counts its largest pool once.

    Raises:
        PrometheusError: the query failed, or a pod's labels lack the two numbers.
    """
    try:
        res = client.custom_query(pool_query(sel, pod_label), params={"time": f"{at:.3f}"})
    except Exception as exc:
        raise PrometheusError(f"{CACHE_CONFIG} at {redact(client.url)}: {describe(exc)}") from None
    engines: dict[tuple[str, str], float] = {}
    for r in res:
        m = r["metric"]
        try:
            pool = float(m["num_gpu_blocks"]) * float(m["block_size"])
        except (KeyError, ValueError):
            raise PrometheusError(f"{CACHE_CONFIG} of pod '{m.get(pod_label, '')}' has no numeric num_gpu_blocks "
                                  "and block_size labels") from None
        key = (m.get(pod_label, ""), m.get("engine", ""))
        engines[key] = max(engines.get(key, 0.0), pool)
    pools: dict[str, float] = {}
    for (pod, _), pool in engines.items():
        pools[pod] = pools.get(pod, 0.0) + pool
    return pools


def busy_windows(client: PrometheusConnect, sel: str, start: float, end: float, window_s: float = 60.0,
                 resolution_s: float = 15.0, pod_label: str = "pod",
                 log: Callable[[str], None] = lambda _: None) -> Rows:
    """The busy windows of every matching pod in ``[start, end]`` (unix s), one row each.

    Raises:
        PrometheusError: a query failed, or no pod's series match ``sel`` (the message names what).
    """
    t0 = datetime.datetime.fromtimestamp(start + window_s, tz=datetime.UTC)
    t1 = datetime.datetime.fromtimestamp(end, tz=datetime.UTC)
    series: dict[str, dict[str, dict[float, float]]] = {}
    for name, template in QUERIES.items():
        q = _render(template, sel, window_s, resolution_s, pod_label)
        try:
            res = client.custom_query_range(q, start_time=t0, end_time=t1, step=duration(window_s))
        except Exception as exc:
            raise PrometheusError(f"query {name} at {redact(client.url)}: {describe(exc)}") from None
        if not res and name not in OPTIONAL:
            raise PrometheusError(f"no series for {q} between {start:.0f} and {end:.0f}: is the selector right, "
                                  "and do the pods export it (vLLM >= 0.7's V1 metrics)?")
        series[name] = _by_pod(res, pod_label)
    pools = pool_tokens(client, sel, end, pod_label)
    rows: list[tuple[float, float, float, float, float, float]] = []
    idle = 0
    for pod, steps in series["steps"].items():
        if pod not in pools:
            raise PrometheusError(f"pod '{pod}' has no {CACHE_CONFIG} series: its KV pool is unknown")
        for t, m in steps.items():
            vals = {k: series[k].get(pod, {}).get(t) for k in QUERIES}
            vals["hits"] = vals["hits"] or 0.0
            if not (vals["running_min"] or 0) >= 1 or m < 1:  # idle for part of it (or unknown)
                idle += 1
                continue
            if any(v is None or not np.isfinite(v) for v in vals.values()):
                continue
            prompt, prefills = float(vals["prompt"] or 0.0), float(vals["prefills"] or 0.0)
            uncached = max(0.0, prompt - float(vals["hits"] or 0.0))
            # Each prefill as the window's mean one: its uncached tokens after its cached ones.
            pairs = prefills * prefill_pairs((prompt - uncached) / prefills, uncached / prefills) if prefills else 0.0
            rows.append((window_s, m, uncached, float(vals["decode"] or 0.0), float(vals["ctx"] or 0.0) * pools[pod],
                         pairs))
    log(f"{len(rows)} busy windows of {window_s:g} s from {len(series['steps'])} pods ({idle} not busy throughout)")
    arr = np.array(rows, dtype=float).reshape(-1, 6)
    return Rows(duration_s=arr[:, 0], steps=arr[:, 1], prefill_tokens=arr[:, 2], decode_seqs=arr[:, 3],
                ctx_tokens=arr[:, 4], prefill_pairs=arr[:, 5], unit="window")
