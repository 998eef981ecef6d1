"""``prometheus.role_labels``: the label a deployment's pods carry for their role, per convention
(``autoscaler.promql.ROLE_LABELLINGS``), in the Prometheus source's selectors, the simulator's
exposition and the roles dashboard, each checked against PromQL and label sets written out by hand.

The conventions' names and values, from the projects' sources:

- llm-d: the pod label ``llm-d.ai/role`` = ``prefill`` | ``decode`` (llm-d-router v0.10.0
  ``pkg/epp/framework/plugins/scheduling/filter/bylabel/roles.go``), kept by Prometheus as ``llm_d_ai_role``;
- Dynamo: the label ``dynamo_component`` its runtime adds to a worker's series (ai-dynamo/dynamo
  ``lib/runtime/src/metrics/prometheus_names.rs`` ``labels::COMPONENT``), ``prefill`` for a vLLM prefill
  worker and ``backend`` for the others (``components/src/dynamo/vllm/args.py``), with
  ``dynamo_namespace`` (default ``dynamo``) and ``dynamo_endpoint`` (``generate``);
- Dynamo's operator: the pod label ``nvidia.com/dynamo-sub-component-type`` = ``prefill`` | ``decode``
  (``deploy/operator/internal/consts/consts.go``), kept as ``nvidia_com_dynamo_sub_component_type``.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

import pytest

from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.config.prometheus import PrometheusConfig
from autoscaler.dashboards.bundle import render
from autoscaler.errors import ConfigError
from autoscaler.promql import ROLE_LABELLINGS
from autoscaler.simulator.exposition import SimCollector
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.simulator.metrics import NUM_REQUESTS_RUNNING
from autoscaler.workload.types import Workload

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}

# convention -> (label, prefill value, decode value), written out from the sources above
BY_HAND = {"llm-d": ("llm_d_ai_role", "prefill", "decode"),
           "dynamo": ("dynamo_component", "prefill", "backend"),
           "dynamo-operator": ("nvidia_com_dynamo_sub_component_type", "prefill", "decode")}


def _variant(name: str, replicas: int = 1) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": replicas,
            "max_replicas": max(replicas, 1), "initial_replicas": replicas, "kv_cache_tokens": 400_000,
            "profile": "llama-3-8b/h100-sxm"}


def _fleet(convention: str | None, services: tuple[str, ...] = ("svc",)) -> FleetConfig:
    doc: dict[str, Any] = {
        "services": [{"name": s, "model": f"m-{s}", "slo": SLO, "variants": [_variant("agg")],
                      "roles": {"prefill": [_variant("p")], "decode": [_variant("d")]}} for s in services],
        "controller": {"tick_s": 1, "window_s": 3}, "prometheus": {"query_set": "vllm-0.11"}}
    if convention is not None:
        doc["prometheus"]["role_labels"] = convention
    return parse_config(doc, "<roles>")


class _Runner:
    """A Prometheus with one fresh pod per variant (``<service>-<variant>-0``) and no samples else; it
    records every query sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
        self.sent.append(promql)
        age = ("min by (pod) (time() - timestamp", "label_replace(min by (pod) (time()")
        if not promql.lstrip("(").startswith(age):
            return []
        if "__autoscaler_scope" not in promql:  # one service: one variant's pods a query
            return [{"metric": {"pod": f"{s}-{v}-0"}, "value": [0, "1"]} for s in ("svc", "two")
                    for v in ("agg", "p", "d") if f'pod=~"{s}-{v}-.*"' in promql]
        # batched: each variant's branch tagged with its scope
        return [{"metric": {"pod": f"{prefix}-0", "__autoscaler_scope": scope}, "value": [0, "1"]}
                for prefix, scope in re.findall(r'pod=~"([\w-]+)-\.\*"[^}]*\}\)\), "__autoscaler_scope", "(\d+)"',
                                                promql)]


def test_every_convention_of_the_fleet_file_has_its_labels() -> None:
    field = PrometheusConfig.model_fields["role_labels"]
    assert set(typing.get_args(field.annotation)) == set(ROLE_LABELLINGS) == set(BY_HAND)
    assert field.default == "llm-d"
    for name, (label, prefill, decode) in BY_HAND.items():
        r = ROLE_LABELLINGS[name]
        assert (r.convention, r.name, r.prefill, r.decode) == (name, label, prefill, decode)
    with pytest.raises(ConfigError, match="role_labels"):
        _fleet("triton")


@pytest.mark.parametrize("convention", [None, "llm-d", "dynamo", "dynamo-operator"])
def test_the_source_selects_each_pool_by_the_conventions_label(convention: str | None) -> None:
    label, prefill, decode = BY_HAND[convention or "llm-d"]
    cfg = _fleet(convention)
    runner = _Runner()
    src = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=3.0)
    svc = cfg.services[0]
    (pre,), (dec,) = svc.roles.prefill, svc.roles.decode  # type: ignore[union-attr]
    assert src.variant_selectors(svc, pre) == (f'namespace="default",pod=~"svc-p-.*",{label}="{prefill}"',
                                               'namespace="default",deployment="svc-p"')
    assert src.variant_selectors(svc, dec) == (f'namespace="default",pod=~"svc-d-.*",{label}="{decode}"',
                                               'namespace="default",deployment="svc-d"')
    assert src.variant_selectors(svc, svc.variants[0])[0] == 'namespace="default",pod=~"svc-agg-.*"'
    src.observe(0.0)
    sent = set(runner.sent)
    for want in (
        # each pool's signals: its role's pods, by name among the valid ones
        f'sum(vllm:num_requests_running{{model_name="m-svc",{label}="{prefill}",pod=~"svc-p-0"}})',
        f'sum(vllm:num_requests_running{{model_name="m-svc",{label}="{decode}",pod=~"svc-d-0"}})',
        f'avg(vllm:kv_cache_usage_perc{{model_name="m-svc",{label}="{decode}",pod=~"svc-d-0"}})',
        # a pool variant's inventory
        f'vllm:num_requests_running{{model_name="m-svc",namespace="default",pod=~"svc-d-.*",{label}="{decode}"}}',
        # the service-wide rates: every pod but the prefill pool's
        f'sum(rate(vllm:e2e_request_latency_seconds_count{{model_name="m-svc",{label}!="{prefill}",'
        'pod=~"svc-agg-0|svc-d-0"}[3000ms]))',
        # the service-wide gauges: every pod
        'sum(vllm:num_requests_running{model_name="m-svc",pod=~"svc-agg-0|svc-d-0|svc-p-0"})',
    ):
        assert want in sent, want
    others = {lbl for lbl, _, _ in BY_HAND.values()} - {label}
    assert not [q for q in runner.sent if any(o in q for o in others)]


def test_the_per_pod_aggregation_groups_by_the_conventions_label() -> None:
    """Two services, batched and aggregated (the defaults): the per-pod aggregation keeps Dynamo's label,
    and the client sums each pool from the groups its matchers select. Running requests per pod, by hand:
    ``svc``: aggregated 5, prefill 2, decode 10; ``two``: 1, 3, 7 (aggregated and decode pods both
    ``backend``): svc's prefill pool 2, decode pool 10, every pod 17; two's 3, 7, 11."""
    cfg = _fleet("dynamo", ("svc", "two"))
    running = {("svc", "agg"): 5, ("svc", "p"): 2, ("svc", "d"): 10, ("two", "agg"): 1, ("two", "p"): 3,
               ("two", "d"): 7}
    grouped = ("sum by (dynamo_component, model_name, namespace, pod) (vllm:num_requests_running{pod=~"
               '"svc-agg-0|svc-d-0|svc-p-0|two-agg-0|two-d-0|two-p-0"})')

    class Runner(_Runner):
        def query(self, promql: str, at: float | None) -> list[dict[str, Any]]:
            if promql != grouped:
                return super().query(promql, at)
            self.sent.append(promql)
            return [{"metric": {"dynamo_component": "prefill" if v == "p" else "backend", "model_name": f"m-{s}",
                                "namespace": "default", "pod": f"{s}-{v}-0"}, "value": [0, str(n)]}
                    for (s, v), n in running.items()]

    runner = Runner()
    obs = PrometheusSource(cfg.prometheus, cfg.services, runner, window_s=3.0).observe(0.0)
    assert grouped in runner.sent and not [q for q in runner.sent if "llm_d_ai_role" in q]
    got = {s: (o.pools["prefill"].signals.running, o.pools["decode"].signals.running, o.signals.running)
           for s, o in obs.items()}
    assert got == {"svc": (2, 10, 17), "two": (3, 7, 11)}


@pytest.mark.parametrize(("convention", "want"), [
    (None, {"svc-agg": {"llm_d_ai_role": ""}, "svc-p": {"llm_d_ai_role": "prefill"},
            "svc-d": {"llm_d_ai_role": "decode"}}),
    ("dynamo", {v: {"dynamo_component": c, "dynamo_namespace": "dynamo", "dynamo_endpoint": "generate"}
                for v, c in (("svc-agg", "backend"), ("svc-p", "prefill"), ("svc-d", "backend"))}),
    ("dynamo-operator", {"svc-agg": {"nvidia_com_dynamo_sub_component_type": ""},
                         "svc-p": {"nvidia_com_dynamo_sub_component_type": "prefill"},
                         "svc-d": {"nvidia_com_dynamo_sub_component_type": "decode"}}),
])
def test_the_simulator_labels_each_pod_as_the_convention_does(convention: str | None,
                                                               want: dict[str, dict[str, str]]) -> None:
    cfg = _fleet(convention)
    sim = FleetSimulator(cfg, Workload([]))
    roles = None if convention is None else ROLE_LABELLINGS[convention]
    fams = {f.name: f for f in SimCollector(sim, role_labels=roles).collect()}
    base = {"model_name", "engine", "namespace", "pod", "variant"}
    got = {s.labels["pod"].rsplit("-", 1)[0]: {k: v for k, v in s.labels.items() if k not in base}
           for s in fams[NUM_REQUESTS_RUNNING].samples}
    assert got == want


def test_a_fleet_without_roles_labels_its_pods_the_dynamo_way_only_when_asked(make_fleet: Any) -> None:
    sim = FleetSimulator(make_fleet(1), Workload([]))
    (plain,) = next(f for f in SimCollector(sim).collect() if f.name == NUM_REQUESTS_RUNNING).samples
    (dyn,) = next(f for f in SimCollector(sim, role_labels=ROLE_LABELLINGS["dynamo"]).collect()
                  if f.name == NUM_REQUESTS_RUNNING).samples
    assert set(plain.labels) == {"model_name", "engine", "namespace", "pod", "variant"}
    assert {k: dyn.labels[k] for k in set(dyn.labels) - set(plain.labels)} == {
        "dynamo_component": "backend", "dynamo_namespace": "dynamo", "dynamo_endpoint": "generate"}


def test_the_roles_dashboard_reads_the_conventions_label() -> None:
    board = json.loads(render(_fleet("dynamo")).files["dashboards/autoscaler-roles.json"])
    exprs = {t["expr"] for p in board["panels"] for t in p.get("targets", [])}
    pods = 'namespace=~"$namespace",model_name=~"$model",variant=~"$variant"'
    for want in (
        f'sum by (dynamo_component) (vllm:num_requests_running{{{pods},dynamo_component=~"prefill|backend"}})',
        # decode and aggregated pods are both "backend": the decode panels also select the decode variants
        f'max by (pod) (vllm:kv_cache_usage_perc{{{pods},dynamo_component="backend",variant=~"d"}})',
        'histogram_quantile(0.95, sum by (le) (autoscaler:vllm_time_to_first_token_seconds_bucket:rate5m'
        f'{{{pods},dynamo_component="prefill"}}))',
        # the loop's own pool series keep their label
        'sum by (llm_d_ai_role) (autoscaler_pool_ready_replicas{service=~"$service",variant=~"$variant"})',
    ):
        assert want in exprs, want
    assert board["description"] == ("A service's prefill and decode pools, read apart by Dynamo's component "
                                    "label dynamo_component.")
    assert not [e for e in exprs if "llm_d_ai_role=" in e]


def test_a_served_simulation_labels_its_pods_as_the_fleet_file_says() -> None:
    """``autoscaler.realtime``: the served simulator follows ``prometheus.role_labels``, so the loop reading
    it through Prometheus finds the labels it selects by."""
    from autoscaler.realtime import LiveSimulation

    for convention, label, decode in ((None, "llm_d_ai_role", "decode"), ("dynamo", "dynamo_component", "backend")):
        live = LiveSimulation(_fleet(convention), Workload([]), steady_start=False)
        fam = next(f for f in live.collector.collect() if f.name == NUM_REQUESTS_RUNNING)
        assert {s.labels["pod"].rsplit("-", 1)[0]: s.labels[label] for s in fam.samples}["svc-d"] == decode


@pytest.mark.parametrize(("role", "convention", "want"), [
    (None, "dynamo", 'model_name="m",variant="h100"'),
    ("prefill", "llm-d", 'model_name="m",variant="h100",llm_d_ai_role="prefill"'),
    ("decode", "dynamo", 'model_name="m",variant="h100",dynamo_component="backend"'),
    ("decode", "dynamo-operator", 'model_name="m",variant="h100",nvidia_com_dynamo_sub_component_type="decode"'),
])
def test_profile_fit_reads_one_pools_pods_by_the_conventions_label(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                                     role: str | None, convention: str,
                                                                     want: str) -> None:
    """``autoscaler profile fit --role R --role-labels C``: the selector the Prometheus fit reads."""
    from typer.testing import CliRunner

    from autoscaler import profile_fit as pf
    from autoscaler.cli import app

    seen: list[str] = []

    def fake(connect: Any, url: str, selector: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(selector)
        raise pf.ProfileError("stop here")

    monkeypatch.setattr(pf, "from_prometheus", fake)
    args = ["profile", "fit", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--out", str(tmp_path / "p.json"),
            "--prometheus-url", "http://127.0.0.1:9", "--selector", 'model_name="m",variant="h100"',
            "--start", "0", "--end", "3600", "--role-labels", convention] + (["--role", role] if role else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0 and "stop here" in res.output
    assert seen == [want]


def test_profile_fit_refuses_an_unknown_role_or_convention() -> None:
    from autoscaler import profile_fit as pf

    with pytest.raises(pf.ProfileError, match="--role agg"):
        pf.role_selector('model_name="m"', "agg", "llm-d")
    with pytest.raises(pf.ProfileError, match="--role-labels triton"):
        pf.role_selector('model_name="m"', "decode", "triton")


@pytest.mark.parametrize(("extra", "named"), [
    (["--role", "prefill"], "--role"),
    (["--role", "decode", "--role-labels", "dynamo"], "--role, --role-labels"),
    (["--selector", 'model_name="m"', "--start", "0", "--end", "3600"], "--selector, --start, --end"),
    (["--window", "30"], "--window"),
    (["--resolution", "5", "--role", "decode"], "--role, --resolution"),
])
def test_profile_fit_refuses_the_prometheus_options_with_bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                              extra: list[str], named: str) -> None:
    """``--role`` narrows the Prometheus fit's selector only: with ``--bench`` it was dropped and the fit of
    the benchmark written as the pool's profile, exit 0. Now one line naming the options, exit 2, before
    the benchmark is read (``from_bench`` would fail the test if called)."""
    from typer.testing import CliRunner

    from autoscaler import profile_fit as pf
    from autoscaler.cli import app

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the benchmark was fitted")

    monkeypatch.setattr(pf, "from_bench", never)
    out = tmp_path / "p.json"
    args = ["profile", "fit", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--out", str(out),
            "--bench", str(tmp_path / "run.json"), *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {named}: read only by the Prometheus fit (--prometheus-url), not with "
                                  "--bench")
    assert not out.exists()


@pytest.mark.parametrize(("extra", "named"), [
    (["--max-num-batched-tokens", "2048"], "--max-num-batched-tokens"),
    (["--max-num-seqs", "64", "--tolerance", "0.01"], "--max-num-seqs, --tolerance"),
])
def test_profile_fit_refuses_the_benchmark_options_with_prometheus(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                                   extra: list[str], named: str) -> None:
    """``--max-num-batched-tokens``, ``--max-num-seqs`` and ``--tolerance`` shape the benchmark's fit only:
    with ``--prometheus-url`` they were dropped, exit 0. Now one line naming them, exit 2, before
    Prometheus is asked (``from_prometheus`` would fail the test if called)."""
    from typer.testing import CliRunner

    from autoscaler import profile_fit as pf
    from autoscaler.cli import app

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Prometheus was fitted")

    monkeypatch.setattr(pf, "from_prometheus", never)
    out = tmp_path / "p.json"
    args = ["profile", "fit", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--out", str(out),
            "--prometheus-url", "http://127.0.0.1:1", "--selector", 'model_name="m"', "--start", "0",
            "--end", "3600", *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"error: {named}: read only by the benchmark's fit (--bench), not with "
                                  "--prometheus-url")
    assert not out.exists()
