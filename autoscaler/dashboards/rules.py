"""Prometheus rules: recording rules for the signals the loop reads and for the SLO error ratios,
and the alerts (multi-window burn rate, loop health), rendered from the fleet file.

Recording rules (``rules/autoscaler-recording.yaml``):

- ``autoscaler.promql.RECORDING_RULES``: the 5-minute rate of every counter and histogram series a
  vLLM 0.33 signal takes a rate of, every label kept (the ``recorded`` query set reads them);
- per service, ``autoscaler:{ttft,itl}_slo_errors:ratio_rate{5m,30m,1h,6h}``: the fraction of its
  requests whose TTFT (time per output token) exceeds the interactive objective, over each window the
  alerts read. A request is within the objective when vLLM's histogram counts it in the largest bucket
  at or below it (``slo_bucket``): exact when the objective is a bucket bound, conservative otherwise
  (a 2-s TTFT objective counts the 1-s bucket; vLLM 0.33 has none between 1 and 2.5 s).

Alerts (``rules/autoscaler-alerts.yaml``), each with a runbook paragraph in docs/runbooks.md:

- ``AutoscalerTTFTBurnRateFast`` / ``AutoscalerITLBurnRateFast`` (page): the error ratio over 1 h and
  over 5 m both above 14.4 x the error budget (``1 - objective``), and ``...BurnRateSlow`` (ticket):
  over 6 h and 30 m above 6 x (the Google SRE workbook, "Alerting on SLOs": 2 % and 5 % of a 30-day
  budget spent in an hour and in six hours);
- ``AutoscalerLoopStalled``: no tick in 10 minutes, or no sample of the loop at all;
- ``AutoscalerMetricsMissing``: for 10 minutes, metric queries failed or decisions were held because
  a signal or a replica count was unknown;
- ``AutoscalerActuationFailing``: for 5 minutes, writes failed or a variant is not able to scale;
- ``AutoscalerVariantStuckPending``: for 15 minutes, a Deployment has fewer ready replicas than it
  wants (pods Pending for want of GPUs, or crash-looping), from kube-state-metrics;
- ``AutoscalerAnotherWriter``: for 10 minutes, a Deployment's replicas differ from what the loop
  decided (another writer: a person, a GitOps sync, another autoscaler); Deployments named
  ``<service>-<variant>``, the default selectors' convention.

``Alert.signals`` are the parts of an alert's expression that have a value while all is well (the
ratios, the counts, the gap), which the bundle's live test requires to return data; the alert's own
expression only has one while it fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client.utils import floatToGoString

from autoscaler.adapters.prometheus import service_selector
from autoscaler.config import FleetConfig
from autoscaler.promql import RECORDING_RULES
from autoscaler.simulator.metrics import ITL_BUCKETS, TTFT_BUCKETS
from autoscaler.workload.types import INTERACTIVE
from controllers.base import HOLD_REASONS, Reason

SLO_WINDOWS = ("5m", "30m", "1h", "6h")
FAST_BURN, SLOW_BURN = 14.4, 6.0
"""Burn-rate factors of the SRE workbook's multi-window alerts (page: 1 h and 5 m; ticket: 6 h and 30 m)."""
MISSING = "|".join(sorted(r.value for r in HOLD_REASONS - {Reason.WARMING_UP}))
"""Decision reasons that mean the loop held because an input was missing (a first window of warm-up is not)."""


def slo_bucket(objective_s: float, buckets: tuple[float, ...]) -> str:
    """The ``le`` label of the largest bucket bound at or below ``objective_s``, as vLLM's client writes it.

    Raises:
        ValueError: the objective is below the smallest bucket.
    """
    below = [b for b in buckets if b <= objective_s + 1e-12]
    if not below:
        raise ValueError(f"objective {objective_s:g} s is below vLLM's smallest bucket ({buckets[0]:g} s)")
    return floatToGoString(below[-1])


def _error_ratio(hist: str, le: str, sel: str, window: str) -> str:
    return (f'1 - sum(rate({hist}_bucket{{{sel},le="{le}"}}[{window}])) / '
            f"sum(rate({hist}_count{{{sel}}}[{window}]))")


def recording_groups(cfg: FleetConfig) -> list[dict[str, Any]]:
    """The recording rule groups (module docstring), as the rule file's ``groups``."""
    signals = [{"record": name, "expr": expr} for name, expr in RECORDING_RULES.items()]
    slo: list[dict[str, Any]] = []
    for svc in cfg.services:
        sel = service_selector(cfg.prometheus, svc)
        objective = svc.slo[INTERACTIVE]
        for key, hist, le in (
            ("ttft", "vllm:time_to_first_token_seconds", slo_bucket(objective.ttft_s, TTFT_BUCKETS)),
            ("itl", "vllm:request_time_per_output_token_seconds", slo_bucket(objective.itl_s, ITL_BUCKETS)),
        ):
            for w in SLO_WINDOWS:
                slo.append({"record": f"autoscaler:{key}_slo_errors:ratio_rate{w}",
                            "expr": _error_ratio(hist, le, sel, w), "labels": {"service": svc.name}})
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

    def rule(self) -> dict[str, Any]:
        """The rule as the rule file holds it."""
        return {"alert": self.name, "expr": self.expr, "for": self.for_,
                "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "runbook": f"docs/runbooks.md#{self.name.lower()}"}}


def alerts(objective: float) -> list[Alert]:
    """The alerts of the module docstring, for an SLO ``objective`` (fraction of requests within it).

    Raises:
        ValueError: an objective outside (0, 1).
    """
    if not 0 < objective < 1:
        raise ValueError(f"SLO objective must be a fraction in (0, 1), got {objective:g}")
    budget = 1 - objective
    out = []
    for key, what in (("ttft", "TTFT"), ("itl", "ITL")):
        for speed, (long_w, short_w), factor, severity in (
            ("Fast", ("1h", "5m"), FAST_BURN, "page"), ("Slow", ("6h", "30m"), SLOW_BURN, "ticket"),
        ):
            long_r, short_r = (f"autoscaler:{key}_slo_errors:ratio_rate{w}" for w in (long_w, short_w))
            limit = f"{factor:g} * {floatToGoString(round(budget, 12))}"
            out.append(Alert(
                f"Autoscaler{what}BurnRate{speed}", f"{long_r} > ({limit}) and {short_r} > ({limit})",
                (long_r, short_r), "2m" if speed == "Fast" else "15m", severity,
                f"{{{{ $labels.service }}}}: {what} SLO error budget burning {factor:g}x too fast "
                f"over {long_w} and {short_w}"))
    gap = "max by (namespace, deployment) (kube_deployment_spec_replicas - kube_deployment_status_replicas_ready)"
    out += [
        Alert("AutoscalerLoopStalled", "increase(autoscaler_loop_duration_seconds_count[10m]) == 0 or "
              "absent_over_time(autoscaler_loop_duration_seconds_count[10m])",
              ("increase(autoscaler_loop_duration_seconds_count[10m])",), "0m", "page",
              "The autoscaler's loop has not ticked (or not been scraped) in 10 minutes: nothing is being decided"),
        Alert("AutoscalerMetricsMissing",
              "sum by (service) (increase(autoscaler_metric_query_failures_total[10m])) > 0 or "
              f'sum by (service) (increase(autoscaler_decisions_total{{reason=~"{MISSING}"}}[10m])) > 0',
              ("sum by (service) (increase(autoscaler_metric_query_failures_total[10m]))",
               f'sum by (service) (increase(autoscaler_decisions_total{{reason=~"{MISSING}"}}[10m]))'),
              "10m", "ticket",
              "{{ $labels.service }}: the loop's metrics are missing; it holds its replicas"),
        Alert("AutoscalerActuationFailing",
              "sum by (service, target) (increase(autoscaler_actuation_errors_total[10m])) > 0 or "
              "min by (service, variant) (autoscaler_able_to_scale) == 0",
              ("sum by (service, target) (increase(autoscaler_actuation_errors_total[10m]))",
               "min by (service, variant) (autoscaler_able_to_scale)"),
              "5m", "page", "{{ $labels.service }}: the autoscaler's writes fail"),
        Alert("AutoscalerVariantStuckPending", f"{gap} > 0", (gap,),
              "15m", "ticket",
              "{{ $labels.deployment }}: fewer replicas ready than wanted for 15 minutes (Pending, crash-looping)"),
        Alert("AutoscalerAnotherWriter",
              "max by (deployment) (kube_deployment_spec_replicas) != on (deployment) max by (deployment) "
              '(label_join(autoscaler_desired_replicas, "deployment", "-", "service", "variant"))',
              ("max by (deployment) (kube_deployment_spec_replicas) - on (deployment) max by (deployment) "
               '(label_join(autoscaler_desired_replicas, "deployment", "-", "service", "variant"))',),
              "10m", "ticket",
              "{{ $labels.deployment }}: replicas differ from the autoscaler's decision for 10 minutes "
              "(another writer)"),
    ]
    return out


def alert_groups(objective: float) -> list[dict[str, Any]]:
    """The alerting rule group, as the rule file's ``groups``."""
    return [{"name": "autoscaler-alerts", "rules": [a.rule() for a in alerts(objective)]}]
