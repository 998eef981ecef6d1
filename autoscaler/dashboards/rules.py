"""Prometheus rules: recording rules for the signals the loop reads and for the SLO error ratios,
and the alerts (multi-window burn rate, loop health), rendered from the fleet file.

Recording rules (``rules/autoscaler-recording.yaml``):

- ``autoscaler.promql.RECORDING_RULES``: the 5-minute rate of every counter and histogram series a
  vLLM 0.33 signal takes a rate of, every label kept (the ``recorded`` query set reads them);
- per service, ``autoscaler:{ttft,itl}_slo_errors:ratio_rate{5m,30m,1h,6h}``: the fraction of its
  requests whose TTFT (time per output token) exceeds the interactive objective, over each window the
  alerts read. The requests within it are counted from vLLM's histogram, exactly when the objective
  is a bucket bound and by linear interpolation inside the bucket that holds it otherwise
  (``slo_buckets``, as ``histogram_quantile`` interpolates): a 2-s TTFT objective, between vLLM
  0.33's 1-s and 2.5-s bounds, counts the 1-s bucket and two thirds of the next. Put objectives on
  bounds for exact counts.

Alerts (``rules/autoscaler-alerts.yaml``), each with a runbook paragraph in docs/runbooks.md that its
``runbook_url`` annotation points at (absolute, ``RUNBOOKS_URL`` by default):

- ``AutoscalerTTFTBurnRateFast`` / ``AutoscalerITLBurnRateFast`` (page): the error ratio over 1 h and
  over 5 m both above 14.4 x the error budget (``1 - objective``), and ``...BurnRateSlow`` (ticket):
  over 6 h and 30 m above 6 x (the Google SRE workbook, "Alerting on SLOs": 2 % and 5 % of a 30-day
  budget spent in an hour and in six hours);
- ``AutoscalerLoopStalled``: no tick in 10 minutes by any instance of the job (a restarted pod's
  old series does not count), or no sample of the loop at all;
- ``AutoscalerMetricsMissing``: for 10 minutes, metric queries failed or decisions were held because
  a signal or a replica count was unknown;
- ``AutoscalerActuationFailing``: for 5 minutes, at least 3 writes failed in 10 minutes (409s left
  out: a conflict is retried, and a lasting one is ``AutoscalerAnotherWriter``), or a variant's last
  write failed (``autoscaler_able_to_scale`` 0);
- ``AutoscalerTwoLeaders`` (page): for a minute, more than one daemon of a job reports
  ``autoscaler_shard_leader`` 1 for one shard (the one Lease is shard 0; sharded daemons each lead
  several shards, never one together), or one reports ``autoscaler_duplicate_identity`` (two processes renewed
  the Lease under one identity): two writers. The election makes this a bug or a misconfiguration
  (two Leases, two identities alike), never a normal failover, whose overlap lasts less than a
  scrape (a leader stops at ``renew_s``, a follower takes over after ``duration_s``); its gauges are
  the daemon's alone, so it has no signal the simulator's live bundle test could read;
- ``AutoscalerShardFailing`` (page): for 5 minutes, one shard's loop has raised on at least 3 ticks in
  10 minutes (``autoscaler_tick_failures_total{identity,shard}``, the daemon's: a bug in a stage, a
  source or a write that raised); the daemon's other shards keep its loop duration counting, so
  ``AutoscalerLoopStalled`` does not see one shard whose services are no longer decided; the
  daemon's alone, like the two-leader gauges;
- ``AutoscalerDemandUnserved`` (page): for 10 minutes, requests of a fleet's model arrive at the
  gateway (the newest of its request counters the scrape has, `autoscaler.promql.GATEWAY_REQUESTS`)
  and vLLM finishes none (an outage the SLO ratios cannot see: no request, no ratio);
- ``AutoscalerVariantStuckPending``: for 15 minutes, one of the fleet's Deployments (in
  ``prometheus.namespace``) has fewer ready replicas than it wants (pods Pending for want of GPUs, or
  crash-looping), from kube-state-metrics; for the fleet's workloads of other kinds (StatefulSet,
  LeaderWorkerSet, InferenceService, a custom resource), which kube-state-metrics has no series of
  (or none this rule reads), from the daemon's own ``autoscaler_workload_desired_replicas`` and
  ``autoscaler_workload_ready_replicas`` (labels ``service``, ``variant``, ``kind``, ``workload``:
  the counts its connector last read from the API server; a LeaderWorkerSet counts groups);
- ``AutoscalerPoolDown`` (page): for 10 minutes, a service's prefill or decode pool (``Service.roles``;
  the loop's ``autoscaler_pool_{desired,ready}_replicas``, by llm-d's role label ``llm_d_ai_role``)
  has fewer than half the ready replicas the loop wants: every request of a P/D service passes its
  decode pool (and a long one its prefill pool), so a pool lost (crashed, evicted, Pending) fails the
  service though the other pool is whole; a cold start (minutes) is shorter than the 10;
- ``AutoscalerAnotherWriter``: for 10 minutes, one of the fleet's Deployments has other replicas than
  the loop decided (another writer: a person, a GitOps sync, another autoscaler); it joins the
  Deployment ``<service>-<variant>`` (the default workload name) to the loop's decision; a workload
  of another kind is joined on its ``service`` and ``variant`` labels from the daemon's gauge.

The branches for other kinds are there only when the fleet has such workloads, so a fleet of
Deployments gets the rules it always had.

``Alert.signals`` are the parts of an alert's expression that have a value while all is well (the
ratios, the counts, the gap), which the bundle's live test requires to return data; the alert's own
expression only has one while it fires.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from prometheus_client.utils import floatToGoString

from autoscaler.adapters.prometheus import service_selector
from autoscaler.config import FleetConfig
from autoscaler.promql import GATEWAY_REQUESTS, RECORDING_RULES, ROLE_LABEL, exact_alternation, first_present, quote
from autoscaler.simulator.metrics import ITL_BUCKETS, TTFT_BUCKETS
from autoscaler.urls import redact
from autoscaler.workload.types import INTERACTIVE
from controllers.base import HOLD_REASONS, Reason

SLO_WINDOWS = ("5m", "30m", "1h", "6h")
FAST_BURN, SLOW_BURN = 14.4, 6.0
"""Burn-rate factors of the SRE workbook's multi-window alerts (page: 1 h and 5 m; ticket: 6 h and 30 m)."""
RUNBOOKS_URL = "https://github.com/llm-autoscaler/llm-autoscaler/blob/main/docs/runbooks.md"
"""The page every alert's ``runbook_url`` points into (each alert a heading of docs/runbooks.md), as
kube-prometheus's mixins point at an absolute runbook URL; ``render(runbooks=...)`` points them at a
copy of your own (a fork, an internal wiki)."""
MISSING = "|".join(sorted(r.value for r in HOLD_REASONS - {Reason.WARMING_UP}))
"""Decision reasons that mean the loop held because an input was missing (a first window of warm-up is not)."""


def slo_buckets(objective_s: float, buckets: tuple[float, ...]) -> tuple[str | None, str, float]:
    """How to count requests within ``objective_s`` from vLLM's histogram: ``(lower le, upper le,
    weight)``, the requests counted within being ``lower + weight x (upper - lower)`` (linear
    interpolation inside the bucket that holds the objective, as ``histogram_quantile`` assumes);
    exact when the objective is a bound (``(None, bound, 1.0)``). Labels as vLLM's client writes them.
    An objective past the largest finite bound counts at it.

    Raises:
        ValueError: the objective is not a positive number.
    """
    if not objective_s > 0:
        raise ValueError(f"objective must be a positive number of seconds, got {objective_s:g}")
    for i, b in enumerate(buckets):
        if abs(b - objective_s) <= 1e-12 * max(1.0, b):
            return None, floatToGoString(b), 1.0
        if b > objective_s:
            lo = buckets[i - 1] if i else 0.0
            weight = (objective_s - lo) / (b - lo)
            return (floatToGoString(lo) if i else None), floatToGoString(b), weight
    return None, floatToGoString(buckets[-1]), 1.0


def within(hist: str, sel: str, objective_s: float, buckets: tuple[float, ...], window: str) -> str:
    """PromQL: requests per second of ``hist`` within ``objective_s`` over ``window`` (``slo_buckets``)."""
    lo, hi, weight = slo_buckets(objective_s, buckets)
    upper = f'sum(rate({hist}_bucket{{{sel},le="{hi}"}}[{window}]))'
    if weight == 1.0:
        return upper
    if lo is None:  # below the first bound: a share of the first bucket
        return f"{upper} * {weight:.6g}"
    lower = f'sum(rate({hist}_bucket{{{sel},le="{lo}"}}[{window}]))'
    return f"({lower} + ({upper} - {lower}) * {weight:.6g})"


def slo_errors(key: str, window: str) -> str:
    """The recording rule of the fraction of requests outside the ``key`` (``ttft`` or ``itl``)
    interactive objective over ``window`` (one of ``SLO_WINDOWS``), per ``service``: what the burn-rate
    alerts and the attainment panel read."""
    return f"autoscaler:{key}_slo_errors:ratio_rate{window}"


def recording_groups(cfg: FleetConfig) -> list[dict[str, Any]]:
    """The recording rule groups (module docstring), as the rule file's ``groups``.

    Raises:
        ValueError: a query set other than vLLM 0.33's (``vllm-0.33``, ``recorded``): the rules and
            panels read vLLM 0.33's series.
    """
    if cfg.prometheus.query_set not in ("auto", "vllm-0.11", "vllm-0.33", "recorded"):
        raise ValueError(f"prometheus.query_set {cfg.prometheus.query_set}: the dashboards and rules read vLLM "
                         "0.11+'s series (auto, vllm-0.11 or recorded); other servers are not covered yet")
    signals = [{"record": name, "expr": expr} for name, expr in RECORDING_RULES.items()]
    slo: list[dict[str, Any]] = []
    for svc in cfg.services:
        sel = service_selector(cfg.prometheus, svc)
        objective = svc.slo[INTERACTIVE]
        for key, hist, target, buckets in (
            ("ttft", "vllm:time_to_first_token_seconds", objective.ttft_s, TTFT_BUCKETS),
            ("itl", "vllm:request_time_per_output_token_seconds", objective.itl_s, ITL_BUCKETS),
        ):
            for w in SLO_WINDOWS:
                ok = within(hist, sel, target, buckets, w)
                slo.append({"record": slo_errors(key, w),
                            "expr": f"1 - {ok} / sum(rate({hist}_count{{{sel}}}[{w}]))",
                            "labels": {"service": svc.name}})
    return [{"name": "autoscaler-signals", "rules": signals}, {"name": "autoscaler-slo", "rules": slo}]


@dataclass(frozen=True)
class Alert:
    """One alerting rule, and the parts of its expression that have a value while all is well (``signals``)."""

    name: str
    expr: str
    signals: tuple[str, ...]
    for_: str
    severity: str
    summary: str

    def rule(self, runbooks: str = RUNBOOKS_URL) -> dict[str, Any]:
        """The rule as the rule file holds it; ``runbook_url`` is ``runbooks#<alert name in lower case>``,
        the alert's heading in docs/runbooks.md."""
        return {"alert": self.name, "expr": self.expr, "for": self.for_,
                "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "runbook_url": runbook_url(self.name, runbooks)}}


def runbook_url(alert: str, runbooks: str = RUNBOOKS_URL) -> str:
    """The absolute URL of ``alert``'s runbook: the page ``runbooks`` and the alert's heading anchor.

    Raises:
        ValueError: ``runbooks`` is not an absolute http(s) URL, or already carries an anchor.
    """
    bad = ValueError(f"runbooks URL {redact(runbooks)!r}: must be an absolute http(s) URL of the page, with a "
                     "host and a valid port, without credentials, spaces or #anchor")
    try:
        parts = urllib.parse.urlsplit(runbooks)
        port = parts.port  # out of 0..65535: ValueError
    except ValueError:
        raise bad from None
    # every alert carries it: no password in a rule file, nothing a line break or space would split
    if (parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or "#" in runbooks
            or parts.username is not None or any(c.isspace() or not c.isprintable() for c in runbooks)):
        raise bad
    return f"{runbooks}#{alert.lower()}"


def alerts(objective: float, cfg: FleetConfig) -> list[Alert]:
    """The alerts of the module docstring, for an SLO ``objective`` (fraction of requests within it)
    and the fleet ``cfg`` (its models, Deployments and namespace).

    Raises:
        ValueError: an objective outside (1 - 1 / 14.4, 1): below it, a fast burn is more than every
            request failing, and the page could never fire.
    """
    lowest = 1 - 1 / FAST_BURN
    if not lowest < objective < 1:
        raise ValueError(f"SLO objective must be above {lowest:.4f} (below, a {FAST_BURN:g}x burn of its budget "
                         f"is more than every request failing) and below 1, got {objective:g}")
    budget = f"{1 - objective:.6g}"
    out = []
    for key, what in (("ttft", "TTFT"), ("itl", "ITL")):
        for speed, (long_w, short_w), factor, severity in (
            ("Fast", ("1h", "5m"), FAST_BURN, "page"), ("Slow", ("6h", "30m"), SLOW_BURN, "ticket"),
        ):
            long_r, short_r = (slo_errors(key, w) for w in (long_w, short_w))
            limit = f"{factor:g} * {budget}"
            out.append(Alert(
                f"Autoscaler{what}BurnRate{speed}", f"{long_r} > ({limit}) and {short_r} > ({limit})",
                (long_r, short_r), "2m" if speed == "Fast" else "15m", severity,
                f"{{{{ $labels.service }}}}: {what} SLO error budget burning {factor:g}x too fast "
                f"over {long_w} and {short_w}"))
    deployments = sorted(cfg.kubernetes.workload_name(s.name, v.name) for s in cfg.services
                         for v in s.variants if cfg.kubernetes.workload(s.name, v.name).kind == "Deployment")
    ksm = f"namespace={quote(cfg.prometheus.namespace)},deployment=~{quote(exact_alternation(deployments))}"
    models = f"model_name=~{quote(exact_alternation(sorted({s.model for s in cfg.services})))}"
    gap = (f"max by (namespace, deployment) (kube_deployment_spec_replicas{{{ksm}}} - "
           f"kube_deployment_status_replicas_ready{{{ksm}}})")
    ticks = "sum by (job) (increase(autoscaler_loop_duration_seconds_count[10m]))"
    errors = ('sum by (service, target) '
              '(increase(autoscaler_actuation_errors_total{result!~"conflict|not_leader"}[10m]))')
    arrivals = first_present(GATEWAY_REQUESTS, models, "5m", by="model_name")
    served = f"sum by (model_name) (rate(vllm:e2e_request_latency_seconds_count{{{models}}}[5m]))"
    spec = f"max by (deployment) (kube_deployment_spec_replicas{{{ksm}}})"
    decided = 'max by (deployment) (label_join(autoscaler_desired_replicas, "deployment", "-", "service", "variant"))'
    stuck = Alert("AutoscalerVariantStuckPending", f"{gap} > 0", (gap,), "15m", "ticket",
                  "{{ $labels.deployment }}: fewer replicas ready than wanted for 15 minutes (Pending, crash-looping)")
    writer = Alert("AutoscalerAnotherWriter", f"{spec} != on (deployment) {decided}",
                   (f"{spec} - on (deployment) {decided}",), "10m", "ticket",
                   "{{ $labels.deployment }}: replicas differ from the autoscaler's decision for 10 minutes "
                   "(another writer)")
    others = sorted({w.name or "" for s in cfg.services for v in s.variants
                     if (w := cfg.kubernetes.workload(s.name, v.name)).kind != "Deployment"})
    if others:  # kinds kube-state-metrics has no series of here: the daemon's own gauges
        own = f'kind!="Deployment",workload=~{quote(exact_alternation(others))}'
        own_gap = (f"max by (service, variant, kind, workload) (autoscaler_workload_desired_replicas{{{own}}} - "
                   f"autoscaler_workload_ready_replicas{{{own}}})")
        own_spec = f"max by (service, variant) (autoscaler_workload_desired_replicas{{{own}}})"
        own_decided = "max by (service, variant) (autoscaler_desired_replicas)"
        stuck = Alert(stuck.name, f"{gap} > 0 or {own_gap} > 0", (gap, own_gap), stuck.for_, stuck.severity,
                      "{{ $labels.deployment }}{{ $labels.workload }}: fewer replicas ready than wanted for 15 "
                      "minutes (Pending, crash-looping)")
        writer = Alert(writer.name, f"{spec} != on (deployment) {decided} or {own_spec} != on (service, variant) "
                       f"{own_decided}", (*writer.signals, f"{own_spec} - on (service, variant) {own_decided}"),
                       writer.for_, writer.severity,
                       "{{ $labels.deployment }}{{ $labels.service }}{{ if $labels.variant }}/{{ end }}"
                       "{{ $labels.variant }}: replicas differ from the autoscaler's decision for 10 minutes "
                       "(another writer)")
    # max by variant first: one value per pool variant however many loops report it
    pool_ready, pool_wanted = (f"sum by (service, {ROLE_LABEL}) (max by (service, variant, {ROLE_LABEL}) "
                               f"(autoscaler_pool_{kind}_replicas))" for kind in ("ready", "desired"))
    out += [
        Alert("AutoscalerLoopStalled",
              f"{ticks} == 0 or absent_over_time(autoscaler_loop_duration_seconds_count[10m])", (ticks,), "0m",
              "page", "The autoscaler's loop has not ticked (or not been scraped) in 10 minutes: nothing is "
              "being decided"),
        Alert("AutoscalerMetricsMissing",
              "sum by (service) (increase(autoscaler_metric_query_failures_total[10m])) > 0 or "
              f'sum by (service) (increase(autoscaler_decisions_total{{reason=~"{MISSING}"}}[10m])) > 0',
              ("sum by (service) (increase(autoscaler_metric_query_failures_total[10m]))",
               f'sum by (service) (increase(autoscaler_decisions_total{{reason=~"{MISSING}"}}[10m]))'),
              "10m", "ticket",
              "{{ $labels.service }}: the loop's metrics are missing; it holds its replicas"),
        Alert("AutoscalerActuationFailing",
              f"{errors} >= 3 or min by (service, variant) (autoscaler_able_to_scale) == 0",
              (errors, "min by (service, variant) (autoscaler_able_to_scale)"),
              "5m", "page", "{{ $labels.service }}: the autoscaler's writes fail"),
        Alert("AutoscalerDemandUnserved", f"{arrivals} > 0 unless on (model_name) {served} > 0", (arrivals, served),
              "10m", "page", "{{ $labels.model_name }}: requests arrive at the gateway and none is served"),
        stuck,
        Alert("AutoscalerPoolDown", f"{pool_ready} < on (service, {ROLE_LABEL}) 0.5 * {pool_wanted}",
              (pool_ready, pool_wanted), "10m", "page",
              f"{{{{ $labels.service }}}}: its {{{{ $labels.{ROLE_LABEL} }}}} pool has fewer than half the ready "
              "replicas the autoscaler wants"),
        writer,
        Alert("AutoscalerShardFailing",
              "sum by (job, shard) (increase(autoscaler_tick_failures_total[10m])) >= 3",
              (), "5m", "page", "{{ $labels.job }}: the loop of shard {{ $labels.shard }} keeps failing: its "
              "services are not being decided"),
        Alert("AutoscalerTwoLeaders",
              "sum by (job, shard) (autoscaler_shard_leader) > 1 "
              "or max by (job, identity) (autoscaler_duplicate_identity) > 0",
              (), "1m", "page", "{{ $labels.job }}: more than one autoscaler daemon leads{{ if $labels.shard }} shard "
              "{{ $labels.shard }}{{ end }}{{ if $labels.identity }} ({{ $labels.identity }} is used by two "
              "processes){{ end }}: two writers"),
    ]
    return out


def alert_groups(objective: float, cfg: FleetConfig, runbooks: str = RUNBOOKS_URL) -> list[dict[str, Any]]:
    """The alerting rule group, as the rule file's ``groups`` (runbook URLs into the page ``runbooks``)."""
    return [{"name": "autoscaler-alerts", "rules": [a.rule(runbooks) for a in alerts(objective, cfg)]}]
