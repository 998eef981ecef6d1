"""The four dashboards: control-loop overview, KV cache and cache warmth, loop health, and the
prefill/decode roles.

Each is a ``Board`` (``panels.py``) built from the fleet file and the SLO objective: the latency
panels' lines are the interactive objectives of its first service; the attainment panel reads the
SLO error-ratio recording rules the burn-rate alerts read (``rules.slo_errors``: requests within the
TTFT or ITL objective from vLLM's histogram buckets, interpolated inside the bucket that holds the
objective) with a line at the objective. A panel that takes the rate of a vLLM or gateway series
reads its recording rule (``panels.recorded``), the 5-minute rate the loop's ``recorded`` query set
reads too; only the loop's own counters are rated in place. Every panel reads a metric the product,
vLLM, kube-state-metrics or the gateway exports today; none waits for one.

The roles board reads a service's prefill and decode pools (``Service.roles``) apart by the pods' role
label as Prometheus keeps it, the one the Prometheus source selects a pool's pods by: llm-d's
``llm_d_ai_role`` by default (``autoscaler.promql.ROLE_LABEL``), else the fleet file's
``prometheus.role_labels`` convention (``autoscaler.promql.ROLE_LABELLINGS``: Dynamo's
``dynamo_component="prefill"|"backend"``, say): the prefill pods' TTFT (their queue and prefill, the
share of the user's TTFT the prefill pool decides), the decode pods' TPOT, TTFT (the hand-over: a
slot, the KV read, the first step) and KV usage, and the loop's replicas per role
(``autoscaler_pool_*_replicas``, the loop's own series, labelled ``llm_d_ai_role`` under every
convention). A fleet without roles has no series there.
"""

from __future__ import annotations

from autoscaler.config import FleetConfig
from autoscaler.dashboards.panels import (
    GATEWAY,
    LOOP,
    LOOP_VARIANT,
    PODS,
    RATE,
    Board,
    first_recorded,
    new_board,
    recorded,
    right_axis,
    series,
    unstacked,
)
from autoscaler.dashboards.rules import slo_errors
from autoscaler.promql import GATEWAY_REQUESTS, ROLE_LABEL, RoleLabels, exact_alternation, quote
from autoscaler.workload.types import INTERACTIVE

TAGS = ["autoscaler", "llm-inference"]
FINISHED = ',finished_reason!~"abort|error"'
"""vLLM's finished requests that were served (FinishReason stop, length, repetition)."""


def _hist(q: float, name: str) -> str:
    return f"histogram_quantile({q}, {recorded(f'{name}_bucket', PODS, 'le')})"


def _attainment(key: str) -> str:
    """The fraction of requests within the ``key`` objective over 5 minutes, per service."""
    return f'1 - {slo_errors(key, "5m")}{{{LOOP}}}'


def overview(cfg: FleetConfig, objective: float) -> Board:
    """Demand and forecast, the GPU mix, SLO attainment (against the ``objective``, a fraction of
    requests) and latency against the SLO, cost, admission, the controlled signal against its setpoint
    (PID terms, MPC plan), and scale decisions."""
    slo = cfg.services[0].slo[INTERACTIVE]
    b = new_board("autoscaler-overview", "Autoscaler: control loop overview",
                  "What the autoscaler sees and decides: demand, replicas, SLOs, cost, admission.", TAGS)
    b.add(series("reqps", "Requests arriving at the gateway, completed by vLLM, and the forecast (point and "
                 "90% interval)."), "Demand and forecast", [
        (first_recorded(GATEWAY_REQUESTS, GATEWAY), "arrivals (gateway)"),
        (recorded("vllm:e2e_request_latency_seconds_count", PODS), "completions"),
        (f"sum by (bound) (autoscaler_forecast_rate_rps{{{LOOP}}})", "forecast {{bound}}"),
    ])
    b.add(unstacked(series("short", "Ready replicas per variant, stacked (the GPU mix); ready + starting and the "
                           "decision as lines.", stack=True, minimum=0), "B", "C"), "Replicas per variant", [
        (f"sum by (variant) (autoscaler_ready_replicas{{{LOOP_VARIANT}}})", "{{variant}} ready"),
        (f"sum(autoscaler_current_replicas{{{LOOP_VARIANT}}})", "ready + starting"),
        (f"sum(autoscaler_desired_replicas{{{LOOP_VARIANT}}})", "desired"),
    ])
    b.add(series("percentunit", f"Fraction of each service's requests over 5 minutes whose TTFT is within its "
                 f"interactive objective ({slo.ttft_s:g} s for {cfg.services[0].name}) and whose time per output "
                 f"token is within its ({slo.itl_s:g} s), against the SLO objective ({objective:.4g}, dashed): the "
                 "recorded error ratios the burn-rate alerts read (vLLM's histogram buckets, interpolated inside "
                 "the bucket that holds the objective).", lines=[(objective, "red")], maximum=1),
          "SLO attainment", [
              (_attainment("ttft"), "{{service}} TTFT"),
              (_attainment("itl"), "{{service}} TPOT (per-request mean ITL)"),
          ])
    b.add(series("s", f"TTFT p50 and p95 against the interactive objective ({slo.ttft_s:g} s, dashed).",
                 lines=[(slo.ttft_s, "red")]), "TTFT", [
        (_hist(0.5, "vllm:time_to_first_token_seconds"), "p50"),
        (_hist(0.95, "vllm:time_to_first_token_seconds"), "p95"),
    ])
    b.add(series("s", f"Each request's time per output token (its mean inter-token latency, vLLM's "
                 f"request_time_per_output_token_seconds, what the objective itl_s bounds) p50 and p95 against the "
                 f"interactive objective ({slo.itl_s:g} s, dashed).", lines=[(slo.itl_s, "red")]),
          "TPOT per request (mean ITL)", [
        (_hist(0.5, "vllm:request_time_per_output_token_seconds"), "p50"),
        (_hist(0.95, "vllm:request_time_per_output_token_seconds"), "p95"),
    ])
    # max by (service, variant): one value per variant however many loops report it (a leader and its
    # followers, a dry-run beside the daemon), so the product has one match per side.
    hourly = (f"max by (service, variant) (autoscaler_current_replicas{{{LOOP_VARIANT}}}) * on (service, variant) "
              f"max by (service, variant) (autoscaler_replica_price_usd_per_hour{{{LOOP_VARIANT}}})")
    cost = f"sum by (variant) ({hourly})"
    b.add(series("currencyUSD", "What the replicas that run (ready or starting) cost per hour, per variant.",
                 stack=True, minimum=0), "Cost per hour", [(cost, "{{variant}}")])
    b.add(series("currencyUSD", "Cost per hour over the requests vLLM finished (not aborted) in that hour.",
                 minimum=0), "Cost per successful request", [
        (f"sum({hourly}) / 3600 / "
         f"{recorded('vllm:request_success_total', PODS + FINISHED)}", "$/request"),
    ])
    b.add(series("s", "Admission threshold per priority: the longest estimated gateway wait a request may be "
                 "admitted to (no line: no limit).", minimum=0), "Admission thresholds", [
        (f"autoscaler_admission_threshold{{{LOOP}}} < +Inf", "{{service}} {{priority}}"),
    ])
    b.add(series("reqps", "Attempts the gateway shed (HTTP 429) per second, per priority.", stack=True, minimum=0),
          "Shed rate by priority", [
              (f"sum by (priority) (rate(autoscaler_admission_shed_total{{{LOOP}}}[{RATE}]))", "{{priority}}"),
          ])
    b.add(series("short", "The controller's measurement against its setpoint (the PID's signal)."),
          "Controlled signal and setpoint", [
              (f"autoscaler_measured{{{LOOP}}}", "{{signal}}"),
              (f"autoscaler_setpoint{{{LOOP}}}", "setpoint"),
          ])
    b.add(series("reqps", "The PID's terms, in requests/s of capacity: P, I, D and the target they sum to."),
          "PID terms", [
              (f'autoscaler_controller_term{{{LOOP},term=~"p|i|d|target_capacity_rps"}}', "{{term}}"),
          ])
    b.add(right_axis(series("short", "Replicas the MPC's plan holds for the next three ticks, per variant (left "
                            "axis), and the demand it serves now (right axis: requests/s).", minimum=0), "B", "reqps"),
          "MPC plan", [
        (f"sum by (variant, step) (autoscaler_mpc_planned_replicas{{{LOOP_VARIANT}}})", "{{variant}} +{{step}}"),
        (f"autoscaler_mpc_demand_rps{{{LOOP}}}", "demand (req/s)"),
    ])
    b.annotate("Scale decisions", f'sum by (service, reason) (changes(autoscaler_decisions_total{{{LOOP},'
               f'reason=~"scale_up|scale_down|idle_to_min|scale_from_zero"}}[1m])) > 0', "a scale-up or -down")
    return b


def kv_cache(cfg: FleetConfig, objective: float) -> Board:
    """KV usage per replica, prefix-cache hit rate, predicted against observed cache warmth,
    preemptions, and the queues that fill when the cache runs out."""
    b = new_board("autoscaler-kv-cache", "Autoscaler: KV cache and cache warmth",
                  "KV-cache pressure and prefix-cache warmth of every replica, and the warmth model's forecast.",
                  TAGS)
    b.add(series("percentunit", "KV-cache usage of each replica (vLLM's kv_cache_usage_perc).", minimum=0),
          "KV-cache usage per replica", [(f"max by (pod) (vllm:kv_cache_usage_perc{{{PODS}}})", "{{pod}}")])
    b.add(series("percentunit", "Prefix-cache hits over prompt tokens looked up, per variant.", minimum=0),
          "Prefix-cache hit rate", [
              (f"{recorded('vllm:prefix_cache_hits_total', PODS, 'variant')} / "
               f"{recorded('vllm:prefix_cache_queries_total', PODS, 'variant')}", "{{variant}}"),
          ])
    horizon = cfg.controller.forecast.horizon_s
    b.add(series("percentunit", f"The cache-warmth model's fleet hit rate forecast {horizon:g} s ahead, against "
                 "the hit rate the loop observed.", minimum=0), "Cache warmth: predicted and observed", [
        (f"autoscaler_forecast_prefix_hit_rate{{{LOOP}}}", "predicted ({{service}})"),
        (f'autoscaler_signal{{{LOOP},signal="prefix_hit_rate"}}', "observed ({{service}})"),
    ])
    b.add(series("short", "Requests preempted per second, per replica (KV cache ran out mid-decode).", minimum=0),
          "Preemptions", [(recorded("vllm:num_preemptions_total", PODS, "pod"), "{{pod}}")])
    b.add(series("short", "Requests running and waiting in vLLM, per variant.", minimum=0), "Running and waiting", [
        (f"sum by (variant) (vllm:num_requests_running{{{PODS}}})", "{{variant}} running"),
        (f"sum by (variant) (vllm:num_requests_waiting{{{PODS}}})", "{{variant}} waiting"),
    ])
    b.add(series("short", "Prompt and generated tokens per second, the work the cache saves or costs.",
                 minimum=0), "Token throughput", [
        (recorded("vllm:prompt_tokens_total", PODS), "prompt"),
        (recorded("vllm:generation_tokens_total", PODS), "generated"),
    ])
    return b


def loop_health(cfg: FleetConfig, objective: float) -> Board:
    """Loop duration, metric-query failures, actuation results, decisions by reason, guard cuts,
    idle ticks and the replicas kube-state-metrics sees."""
    b = new_board("autoscaler-loop-health", "Autoscaler: loop health",
                  "Is the loop ticking, reading its metrics, and getting its writes through?", TAGS)
    tick = cfg.controller.tick_s
    b.add(series("s", f"Wall time of one loop tick, p50 and p99 (a tick is {tick:g} s apart).", minimum=0),
          "Loop duration", [
              (f"histogram_quantile(0.5, sum by (le) (rate(autoscaler_loop_duration_seconds_bucket[{RATE}])))", "p50"),
              (f"histogram_quantile(0.99, sum by (le) (rate(autoscaler_loop_duration_seconds_bucket[{RATE}])))",
               "p99"),
          ])
    b.add(series("short", "Metric queries that failed, per minute (the loop holds while its inputs are unknown).",
                 minimum=0), "Metric-query failures", [
        (f"sum by (service) (increase(autoscaler_metric_query_failures_total{{{LOOP}}}[1m]))", "{{service}}"),
    ])
    b.add(series("short", "Writes that failed per minute, by target and result; and whether each variant's last "
                 "write was applied (1) or not (0).", minimum=0), "Actuation results", [
        (f"sum by (target, result) (increase(autoscaler_actuation_errors_total{{{LOOP}}}[1m]))",
         "{{target}} {{result}}"),
        (f"min by (variant) (autoscaler_able_to_scale{{{LOOP_VARIANT}}})", "{{variant}} able to scale"),
    ])
    b.add(series("short", "Decisions per minute by reason (scale_up, scale_down, no_change, holds and why).",
                 stack=True, minimum=0), "Decisions by reason", [
        (f"sum by (reason) (increase(autoscaler_decisions_total{{{LOOP}}}[1m]))", "{{reason}}"),
    ])
    b.add(series("short", "Consecutive idle ticks per service (the loop goes to the minimum after enough).",
                 minimum=0), "Idle ticks", [(f"autoscaler_idle_ticks{{{LOOP}}}", "{{service}}")])
    b.add(series("short", "Replicas per Deployment as kube-state-metrics reports them: wanted (spec) and ready; "
                 "a gap that lasts is a variant stuck starting or Pending.", minimum=0), "Deployments", [
        ('sum by (deployment) (kube_deployment_spec_replicas{namespace=~"$namespace"})', "{{deployment}} spec"),
        ('sum by (deployment) (kube_deployment_status_replicas_ready{namespace=~"$namespace"})',
         "{{deployment}} ready"),
    ])
    return b


WHOSE = {"llm-d": "llm-d's pod label", "dynamo": "Dynamo's component label",
         "dynamo-operator": "Dynamo's operator pod label"}
"""How the roles board's description names each ``prometheus.role_labels`` convention's label."""


def role_pods(roles: RoleLabels, decode_variants: list[str] | None = None) -> tuple[str, str, str]:
    """The dashboards' pod matchers of the prefill pods, the decode pods and both, under ``roles``
    (the fleet's ``prometheus.role_labels``), e.g. ``...,llm_d_ai_role="prefill"``. Where the decode
    pods' label value is the aggregated pods' too (Dynamo's ``backend``), the decode matcher also
    selects ``decode_variants`` by the pods' ``variant`` label (as ``PODS`` does), so an aggregated pod
    is not read as a decode one."""
    both = f"{roles.name}=~{quote(roles.prefill + '|' + roles.decode)}"
    decode = f"{PODS},{roles.is_('decode')}"
    if roles.decode == roles.aggregated and decode_variants:
        decode += f",variant=~{quote(exact_alternation(decode_variants))}"
    return f"{PODS},{roles.is_('prefill')}", decode, f"{PODS},{both}"


def roles(cfg: FleetConfig, objective: float) -> Board:
    """Prefill/decode pools read apart by llm-d's role label (module docstring): replicas per role,
    prefill TTFT, decode TPOT and hand-over TTFT against the interactive objectives, decode KV usage,
    running and waiting per role, and prompt tokens prefilled per role."""
    slo = cfg.services[0].slo[INTERACTIVE]
    roles = cfg.prometheus.roles
    role = roles.name  # the pods' role label; the loop's own pool series keep ROLE_LABEL
    decoders = sorted({v.name for svc in cfg.services for r, v in svc.role_variants() if r == "decode"})
    prefill_pods, decode_pods, any_role_pods = role_pods(roles, decoders)
    b = new_board("autoscaler-roles", "Autoscaler: prefill/decode roles",
                  f"A service's prefill and decode pools, read apart by {WHOSE[roles.convention]} {role}.", TAGS)
    pool = f"{{{LOOP_VARIANT}}}"
    b.add(unstacked(series("short", "Ready replicas per role (prefill, decode) stacked; ready + starting and the "
                           "loop's decision per role as lines.", stack=True, minimum=0), "B", "C"),
          "Replicas per role", [
              (f"sum by ({ROLE_LABEL}) (autoscaler_pool_ready_replicas{pool})", f"{{{{{ROLE_LABEL}}}}} ready"),
              (f"sum by ({ROLE_LABEL}) (autoscaler_pool_current_replicas{pool})",
               f"{{{{{ROLE_LABEL}}}}} ready + starting"),
              (f"sum by ({ROLE_LABEL}) (autoscaler_pool_desired_replicas{pool})", f"{{{{{ROLE_LABEL}}}}} desired"),
          ])
    ttft = "vllm:time_to_first_token_seconds_bucket"
    b.add(series("s", f"TTFT of the prefill pods p50 and p95 (their queue and prefill: a prefill pod runs each prompt "
                 f"as a one-token request) against the interactive TTFT objective ({slo.ttft_s:g} s, dashed), "
                 "which the user's TTFT, with the hand-over, must meet.", lines=[(slo.ttft_s, "red")]),
          "Prefill TTFT", [
              (f"histogram_quantile(0.5, {recorded(ttft, prefill_pods, 'le')})", "p50"),
              (f"histogram_quantile(0.95, {recorded(ttft, prefill_pods, 'le')})", "p95"),
          ])
    tpot = "vllm:request_time_per_output_token_seconds_bucket"
    b.add(series("s", f"Each request's time per output token on the decode pods (its mean ITL) p50 and p95 against "
                 f"the interactive objective ({slo.itl_s:g} s, dashed).", lines=[(slo.itl_s, "red")]),
          "Decode TPOT per request (mean ITL)", [
              (f"histogram_quantile(0.5, {recorded(tpot, decode_pods, 'le')})", "p50"),
              (f"histogram_quantile(0.95, {recorded(tpot, decode_pods, 'le')})", "p95"),
          ])
    b.add(series("s", "TTFT the decode pods record p50 and p95: from the hand-over to the first token (a batch "
                 "slot, the KV read over the link, the first step); a slow KV link shows here first.", minimum=0),
          "Decode hand-over TTFT", [
              (f"histogram_quantile(0.5, {recorded(ttft, decode_pods, 'le')})", "p50"),
              (f"histogram_quantile(0.95, {recorded(ttft, decode_pods, 'le')})", "p95"),
          ])
    b.add(series("percentunit", "KV-cache usage of each decode pod (vLLM's kv_cache_usage_perc), and the pool's "
                 "mean, which the PID's decode loop reads.", minimum=0, maximum=1), "Decode KV-cache usage", [
        (f"max by (pod) (vllm:kv_cache_usage_perc{{{decode_pods}}})", "{{pod}}"),
        (f"avg(vllm:kv_cache_usage_perc{{{decode_pods}}})", "decode mean"),
    ])
    b.add(series("short", "Requests running and waiting per role (a decode pod counts a request waiting for its "
                 "KV as waiting, as vLLM does).", minimum=0), "Running and waiting per role", [
        (f"sum by ({role}) (vllm:num_requests_running{{{any_role_pods}}})", f"{{{{{role}}}}} running"),
        (f"sum by ({role}) (vllm:num_requests_waiting{{{any_role_pods}}})", f"{{{{{role}}}}} waiting"),
    ])
    b.add(series("short", "Prompt tokens per second each role computes (a decode pod prefills the prompts llm-d "
                 "keeps local and the last token of those handed over).", minimum=0), "Prompt tokens per role", [
        (recorded("vllm:prompt_tokens_total", any_role_pods, role), f"{{{{{role}}}}}"),
    ])
    return b


BOARDS = (overview, kv_cache, loop_health, roles)
"""Each built from the fleet and the SLO objective (a fraction of requests; only the overview draws it)."""
