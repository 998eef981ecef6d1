"""The dashboard bundle (autoscaler.dashboards): the committed copy is what the generator writes, the
rules pass ``promtool check rules`` and the hand-written ``promtool test rules`` file, the dashboards
have what an operator expects of them, the recorded query set and the ``export`` command."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.config.loading import default_config, parse_config
from autoscaler.dashboards.bundle import render
from autoscaler.dashboards.rules import alerts, recording_groups, slo_buckets, slo_errors
from autoscaler.errors import ConfigError
from autoscaler.faults.promserver import PROMTOOL, require
from autoscaler.promql import QUERY_SETS, RECORDING_RULES
from autoscaler.simulator.metrics import ITL_BUCKETS, TTFT_BUCKETS

COMMITTED = ROOT / "dashboards"


def test_the_committed_bundle_is_what_export_writes_for_the_default_fleet() -> None:
    files = render(default_config()).files
    exported = ("dashboards", "provisioning", "rules", "kubernetes")
    committed = {str(p.relative_to(COMMITTED)): p.read_text() for p in COMMITTED.rglob("*")
                 if p.is_file() and p.parts[len(COMMITTED.parts)] in exported}
    assert sorted(committed) == sorted(files)
    stale = [rel for rel, text in files.items() if committed[rel] != text]
    assert not stale, f"regenerate with `autoscaler dashboards export --out dashboards`: {stale}"


def test_promtool_checks_the_rules() -> None:
    rules = sorted((COMMITTED / "rules").glob("*.yaml"))
    res = subprocess.run([require(PROMTOOL), "check", "rules", *map(str, rules)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    # 27 recording rules: one per rated series (19, three of them the gateway's names) and 8 SLO error ratios.
    assert "SUCCESS: 13 rules found" in res.stdout and "SUCCESS: 27 rules found" in res.stdout


def test_promtool_unit_tests_of_every_alert_pass() -> None:
    test_file = COMMITTED / "tests" / "alerts.test.yaml"
    res = subprocess.run([require(PROMTOOL), "test", "rules", str(test_file)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # each alert has a case where it fires and one where it must not
    tested = yaml.safe_load(test_file.read_text())["tests"]
    fired, quiet = set(), set()
    for case in tested:
        for t in case["alert_rule_test"]:
            (fired if t["exp_alerts"] else quiet).add(t["alertname"])
    names = {a.name for a in alerts(0.99, default_config())}
    assert fired == names and quiet == names


def test_every_alert_has_an_absolute_runbook_url_to_its_heading() -> None:
    # an alert's name is one word: its heading's anchor is the name in lower case
    headings = {line[3:].strip().lower() for line in (ROOT / "docs" / "runbooks.md").read_text().splitlines()
                if line.startswith("## ")}
    groups = yaml.safe_load((COMMITTED / "rules" / "autoscaler-alerts.yaml").read_text())["groups"]
    shipped = {r["alert"]: r["annotations"] for g in groups for r in g["rules"]}
    assert set(shipped) == {a.name for a in alerts(0.99, default_config())}
    for name, notes in shipped.items():
        assert "runbook" not in notes, f"{name}: the relative runbook annotation is gone"
        url = urllib.parse.urlsplit(notes["runbook_url"])
        assert url.scheme == "https" and url.netloc, f"{name}: {notes['runbook_url']} is not absolute"
        assert url.path.endswith("/docs/runbooks.md"), url.path
        assert url.fragment in headings, f"{name}: no heading #{url.fragment} in docs/runbooks.md"
        assert url.fragment == name.lower()
    # the page is configurable (a fork, a wiki); a relative or anchored base is refused
    mine = render(default_config(), runbooks="https://wiki.example.com/ops/autoscaler").files
    assert "runbook_url: https://wiki.example.com/ops/autoscaler#autoscalerloopstalled" in mine[
        "rules/autoscaler-alerts.yaml"]
    for bad in ("docs/runbooks.md", "https://wiki.example.com/page#x", "ftp://host/page", "https://wiki.example.org/r.md#",
                "https://:443/r.md", "https://user@/r.md", "https://wiki.example.org:99999/r.md", "https://[::1/r.md",
                "https://wiki example.org/r.md", "https://x/r.md\nfoo", "https://user:s3cret@wiki.example.org/r.md"):
        with pytest.raises(ValueError, match="must be an absolute http"):
            render(default_config(), runbooks=bad)


def test_export_points_the_runbook_urls_where_the_operator_serves_the_runbooks(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "b"),
                                   "--runbook-url", "https://wiki.example.org/llm/runbooks.md"])
    assert res.exit_code == 0, res.output
    groups = yaml.safe_load((tmp_path / "b" / "rules" / "autoscaler-alerts.yaml").read_text())["groups"]
    urls = {r["alert"]: r["annotations"]["runbook_url"] for g in groups for r in g["rules"]}
    assert urls and all(u == f"https://wiki.example.org/llm/runbooks.md#{a.lower()}" for a, u in urls.items())
    bad = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "c"),
                                   "--runbook-url", "runbooks.md"])
    assert bad.exit_code != 0 and "absolute http" in bad.output
    assert not (tmp_path / "c").exists()


def test_requests_within_an_objective_are_counted_exactly_on_a_bound_and_interpolated_between() -> None:
    assert slo_buckets(2.5, TTFT_BUCKETS) == (None, "2.5", 1.0) and slo_buckets(0.1, ITL_BUCKETS) == (None, "0.1", 1.0)
    lo, hi, w = slo_buckets(2.0, TTFT_BUCKETS)  # vLLM 0.33 has 1.0 and 2.5 around it
    assert (lo, hi) == ("1.0", "2.5") and w == pytest.approx((2.0 - 1.0) / (2.5 - 1.0))
    lo, hi, w = slo_buckets(0.0005, TTFT_BUCKETS)  # below the first bound: a share of the first bucket
    assert (lo, hi) == (None, "0.001") and w == pytest.approx(0.5)
    assert slo_buckets(1e9, TTFT_BUCKETS) == (None, "2560.0", 1.0)
    with pytest.raises(ValueError, match="positive number of seconds"):
        slo_buckets(0.0, TTFT_BUCKETS)


def test_the_objective_must_let_the_fast_burn_fire(tmp_path: Path) -> None:
    for bad in (0.9, 0.93, 1.0):
        with pytest.raises(ValueError, match=r"SLO objective must be above 0\.9306"):
            alerts(bad, default_config())
    tiny = next(a for a in alerts(0.9999999999999, default_config()) if a.name == "AutoscalerTTFTBurnRateFast")
    assert f"(14.4 * {1 - 0.9999999999999:.6g})" in tiny.expr and "* 0)" not in tiny.expr  # never rounded to 0


def test_other_query_sets_are_refused(make_fleet) -> None:
    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    for qs in ("sglang", "vllm-pre-0.9", "vllm-0.9.2"):
        with pytest.raises(ValueError, match=f"prometheus.query_set {qs}: the dashboards and rules read vLLM 0.11"):
            render(parse_config({**doc, "prometheus": {"query_set": qs}}, "f.yaml"))


def _boards() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (COMMITTED / "dashboards").glob("*.json")}


def test_dashboards_have_stable_uids_variables_units_and_slo_lines() -> None:
    boards = _boards()
    assert set(boards) == {"autoscaler-overview", "autoscaler-kv-cache", "autoscaler-loop-health", "autoscaler-roles"}
    slo = default_config().services[0].slo["interactive"]
    for uid, b in boards.items():
        assert b["uid"] == uid
        variables = {v["name"]: v for v in b["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert {"namespace", "service", "variant"} <= set(variables)
        titles = [p["title"] for p in b["panels"]]
        assert len(titles) == len(set(titles)) >= 6
        for p in b["panels"]:
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["fieldConfig"]["defaults"].get("unit"), f"{uid} / {p['title']}: no unit"
            assert p["targets"] and all(t["expr"] for t in p["targets"])
            # no two panels overlap on the 24-column grid
        cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in b["panels"]]
        assert len(cells) == len(set(cells))
    latency = {p["title"]: p for p in boards["autoscaler-overview"]["panels"]}
    for title, objective in (("TTFT", slo.ttft_s), ("TPOT per request (mean ITL)", slo.itl_s),
                             ("SLO attainment", 0.99)):
        steps = latency[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps if s["value"] is not None] == [objective]
        assert latency[title]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
    assert {b["schemaVersion"] for b in boards.values()} == {39}


def test_the_attainment_panel_reads_the_alerts_error_ratios_with_a_line_at_the_objective() -> None:
    for objective in (0.99, 0.995):
        model = json.loads(render(default_config(), objective).files["dashboards/autoscaler-overview.json"])
        panel = next(p for p in model["panels"] if p["title"] == "SLO attainment")
        defaults = panel["fieldConfig"]["defaults"]
        assert [s["value"] for s in defaults["thresholds"]["steps"] if s["value"] is not None] == [objective]
        assert defaults["custom"]["thresholdsStyle"]["mode"] == "dashed" and defaults["max"] == 1
        # the ratio the fast burn-rate alert's short window reads, so the panel and the page agree
        assert [t["expr"] for t in panel["targets"]] == [
            f'1 - {slo_errors(key, "5m")}{{service=~"$service"}}' for key in ("ttft", "itl")]
        fast = next(a for a in alerts(objective, default_config()) if a.name == "AutoscalerTTFTBurnRateFast")
        assert slo_errors("ttft", "5m") in fast.expr


def test_the_roles_board_reads_each_pool_by_llm_ds_role_label() -> None:
    # prefill TTFT from the prefill pods, decode TPOT, TTFT and KV usage from the decode pods, each with
    # the interactive objective drawn where there is one; replicas per role from the loop's pool gauges
    panels = {p["title"]: p for p in _boards()["autoscaler-roles"]["panels"]}
    slo = default_config().services[0].slo["interactive"]
    role = {title: {m for t in panels[title]["targets"] for m in re.findall(r'llm_d_ai_role="(\w+)"', t["expr"])}
            for title in panels}
    assert role["Prefill TTFT"] == {"prefill"}
    assert role["Decode TPOT per request (mean ITL)"] == role["Decode hand-over TTFT"] == \
        role["Decode KV-cache usage"] == {"decode"}
    assert all("time_to_first_token_seconds_bucket" in t["expr"] for t in panels["Prefill TTFT"]["targets"])
    for title, objective in (("Prefill TTFT", slo.ttft_s), ("Decode TPOT per request (mean ITL)", slo.itl_s)):
        steps = panels[title]["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps if s["value"] is not None] == [objective]
    replicas = [t["expr"] for t in panels["Replicas per role"]["targets"]]
    assert [e.split("(")[0].strip() for e in replicas] == ["sum by"] * 3
    assert all("by (llm_d_ai_role)" in e for e in replicas)
    assert {re.search(r"autoscaler_pool_(\w+)_replicas", e)[1] for e in replicas} == {"ready", "current", "desired"}


def test_the_mpc_plan_draws_the_demand_on_its_own_axis_in_requests_per_second() -> None:
    panel = next(p for p in _boards()["autoscaler-overview"]["panels"] if p["title"] == "MPC plan")
    assert panel["fieldConfig"]["defaults"]["unit"] == "short"  # replicas, on the left
    demand = next(t for t in panel["targets"] if "autoscaler_mpc_demand_rps" in t["expr"])
    (override,) = panel["fieldConfig"]["overrides"]
    assert override["matcher"] == {"id": "byFrameRefID", "options": demand["refId"]}
    assert {p["id"]: p["value"] for p in override["properties"]} == {"unit": "reqps", "custom.axisPlacement": "right"}


def test_every_panel_reads_the_recorded_series_where_a_recording_rule_has_it() -> None:
    """The mapping is the rules' own: each recording rule ``rate(S[w])`` means no panel rates S itself;
    every recorded name a panel reads is a rule's."""
    bundle = render(default_config())
    rules = [r for g in recording_groups(default_config()) for r in g["rules"]]
    rated = {m["series"]: r["record"] for r in rules
             if (m := re.fullmatch(r"rate\((?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*)\[\w+\]\)", r["expr"]))}
    assert len(rated) == 19, rated  # the rated vLLM and gateway series (docs/dashboards.md)
    records = {r["record"] for r in rules}
    used = set()
    for uid, title, expr in bundle.panel_queries:
        for series in rated:
            assert not re.search(rf"rate\(\s*{re.escape(series)}\s*[{{\[]", expr), \
                f"{uid} / {title}: rates {series} itself; its recording rule is {rated[series]}"
        names = set(re.findall(r"autoscaler:[a-zA-Z0-9_:]+", expr))
        assert names <= records, f"{uid} / {title}: reads {names - records}, which no rule records"
        used |= names
    # the panels' vLLM rates, the gateway's arrivals and the attainment are all read from the rules
    assert {rated["vllm:time_to_first_token_seconds_bucket"], rated["vllm:prefix_cache_hits_total"],
            rated["llm_d_epp_request_total"], slo_errors("ttft", "5m")} <= used
    # 12 rated series (3 of them the gateway's names) and the 2 attainment ratios
    assert len(used) == 14, used


def test_provisioning_points_grafana_at_the_bundle() -> None:
    ds = yaml.safe_load((COMMITTED / "provisioning" / "datasources" / "autoscaler.yaml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    assert ds["datasources"][0]["uid"] == "autoscaler-prometheus" and ds["datasources"][0]["isDefault"] is False
    prov = yaml.safe_load((COMMITTED / "provisioning" / "dashboards" / "autoscaler.yaml").read_text())
    assert prov["providers"][0]["type"] == "file" and prov["providers"][0]["options"]["path"]


def test_the_kubernetes_files_carry_the_same_rules_and_dashboards() -> None:
    rule = yaml.safe_load((COMMITTED / "kubernetes" / "prometheusrule.yaml").read_text())
    files = [yaml.safe_load((COMMITTED / "rules" / f).read_text())["groups"]
             for f in ("autoscaler-recording.yaml", "autoscaler-alerts.yaml")]
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == files[0] + files[1]
    cm = yaml.safe_load((COMMITTED / "kubernetes" / "dashboards-configmap.yaml").read_text())
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == {f"{uid}.json": b for uid, b in _boards().items()}


def test_the_datasource_defaults_to_the_fleets_prometheus(make_fleet) -> None:
    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "prometheus": {"url": "http://prom.example:9090"}}, "f.yaml")
    ds = yaml.safe_load(render(cfg).files["provisioning/datasources/autoscaler.yaml"])
    assert ds["datasources"][0]["url"] == "http://prom.example:9090"


def test_the_recorded_query_set_reads_only_recorded_rates() -> None:
    recorded = QUERY_SETS["recorded"]
    assert set(recorded.signals) == set(QUERY_SETS["vllm-0.11"].signals)
    for signal, template in recorded.signals.items():
        assert "rate(" not in template and "$window" not in template and "$sel" in template, signal
    used = {name for t in recorded.signals.values() for name in RECORDING_RULES if name in t}
    assert used == set(RECORDING_RULES)  # every recording rule is read, none is left over
    assert all(expr.startswith("rate(") and expr.endswith("[5m])") for expr in RECORDING_RULES.values())


def test_the_recorded_query_set_needs_the_rules_window(make_fleet) -> None:
    from autoscaler.adapters.prometheus import PrometheusSource

    doc = make_fleet(1).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "prometheus": {"query_set": "recorded"}}, "f.yaml")
    with pytest.raises(ValueError, match="speed must be 1"):
        PrometheusSource(cfg.prometheus, cfg.services, runner=None, window_s=cfg.controller.window_s, speed=10.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"controller\.window_s must be 300, not 60"):
        parse_config({**doc, "prometheus": {"query_set": "recorded"}, "controller": {"window_s": 60}}, "f.yaml")


def test_export_writes_the_bundle_and_refuses_bad_settings(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "b"),
                                   "--prometheus-url", "http://prom.monitoring:9090"])
    assert res.exit_code == 0, res.output
    assert "wrote 10 files" in res.output  # 4 dashboards, 2 provisioning files, 2 rule files, 2 Kubernetes
    ds = yaml.safe_load((tmp_path / "b" / "provisioning" / "datasources" / "autoscaler.yaml").read_text())
    assert ds["datasources"][0]["url"] == "http://prom.monitoring:9090"
    alert_rules = yaml.safe_load((tmp_path / "b" / "rules" / "autoscaler-alerts.yaml").read_text())
    fast = next(r for g in alert_rules["groups"] for r in g["rules"] if r["alert"] == "AutoscalerTTFTBurnRateFast")
    assert "(14.4 * 0.01)" in fast["expr"]
    for args, message in ((["--objective", "1.5"], "SLO objective must be above 0.9306"),
                          (["--prometheus-url", "prom:9090"], "must start with http:// or https://")):
        res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "c"), *args])
        assert res.exit_code == 2 and message in res.output, res.output
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "d"), "--objective", "0.999"])
    assert res.exit_code == 0
    slow = (tmp_path / "d" / "rules" / "autoscaler-alerts.yaml").read_text()
    assert "(6 * 0.001)" in slow


LWS_ALERTS_TEST = """
rule_files: [rules/autoscaler-recording.yaml, rules/autoscaler-alerts.yaml]
evaluation_interval: 1m
tests:
  # svc/h100 is the LeaderWorkerSet svc-h100: it wants 3 groups and has 1 ready for 40 minutes (the
  # daemon's gauges; kube-state-metrics has no LeaderWorkerSet series). A workload the fleet does not
  # hold, and a Deployment's gauge (kube-state-metrics' branch covers those), lag too and must not fire.
  - interval: 1m
    input_series:
      - series: 'autoscaler_workload_desired_replicas{service="svc",variant="h100",
          kind="LeaderWorkerSet",workload="svc-h100"}'
        values: '3x40'
      - series: 'autoscaler_workload_ready_replicas{service="svc",variant="h100",
          kind="LeaderWorkerSet",workload="svc-h100"}'
        values: '1x40'
      - series: 'autoscaler_workload_desired_replicas{service="x",variant="y",
          kind="LeaderWorkerSet",workload="x-y"}'
        values: '3x40'
      - series: 'autoscaler_workload_ready_replicas{service="x",variant="y",
          kind="LeaderWorkerSet",workload="x-y"}'
        values: '0x40'
      - series: 'autoscaler_workload_desired_replicas{service="svc",variant="h100",
          kind="Deployment",workload="svc-h100"}'
        values: '3x40'
      - series: 'autoscaler_workload_ready_replicas{service="svc",variant="h100",
          kind="Deployment",workload="svc-h100"}'
        values: '0x40'
      - series: 'autoscaler_desired_replicas{service="svc",variant="h100"}'
        values: '3x40'
    alert_rule_test:
      - eval_time: 10m
        alertname: AutoscalerVariantStuckPending
        exp_alerts: []
      - eval_time: 20m
        alertname: AutoscalerVariantStuckPending
        exp_alerts:
          - exp_labels: {severity: ticket, service: svc, variant: h100, kind: LeaderWorkerSet, workload: svc-h100}
            exp_annotations:
              summary: "svc-h100: fewer replicas ready than wanted for 15 minutes (Pending, crash-looping)"
              runbook_url: https://github.com/llm-autoscaler/llm-autoscaler/blob/main/docs/runbooks.md#autoscalervariantstuckpending
      - eval_time: 20m
        alertname: AutoscalerAnotherWriter
        exp_alerts: []
  # Someone set the LeaderWorkerSet to 5 groups while the loop decides 3.
  - interval: 1m
    input_series:
      - series: 'autoscaler_workload_desired_replicas{service="svc",variant="h100",
          kind="LeaderWorkerSet",workload="svc-h100"}'
        values: '3x5 5x30'
      - series: 'autoscaler_workload_ready_replicas{service="svc",variant="h100",
          kind="LeaderWorkerSet",workload="svc-h100"}'
        values: '3x5 5x30'
      - series: 'autoscaler_desired_replicas{service="svc",variant="h100"}'
        values: '3x35'
    alert_rule_test:
      - eval_time: 25m
        alertname: AutoscalerAnotherWriter
        exp_alerts:
          - exp_labels: {severity: ticket, service: svc, variant: h100}
            exp_annotations:
              summary: "svc/h100: replicas differ from the autoscaler's decision for 10 minutes (another writer)"
              runbook_url: https://github.com/llm-autoscaler/llm-autoscaler/blob/main/docs/runbooks.md#autoscaleranotherwriter
      - eval_time: 25m
        alertname: AutoscalerVariantStuckPending
        exp_alerts: []
"""


def test_a_leaderworkerset_gets_the_replica_gap_and_another_writer_alerts(tmp_path: Path, make_fleet) -> None:
    doc = make_fleet(2).model_dump(mode="json", exclude_unset=True)
    cfg = parse_config({**doc, "kubernetes": {"workloads": {"svc": {"h100": {"kind": "LeaderWorkerSet"}}}}},
                       "<test>")
    for rel, text in render(cfg).files.items():
        if rel.startswith("rules/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
    (tmp_path / "lws.test.yaml").write_text(LWS_ALERTS_TEST)
    res = subprocess.run([require(PROMTOOL), "test", "rules", str(tmp_path / "lws.test.yaml")], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # a fleet of Deployments keeps the rules it had: no branch on the daemon's own gauges
    assert not any("autoscaler_workload_" in a.expr for a in alerts(0.99, default_config()))


def test_a_url_with_credentials_never_puts_them_in_the_bundle() -> None:
    """The datasource gets the URL without ``user:password@`` and basic auth read from the environment
    when Grafana provisions it (issue 31, item 11)."""
    files = render(default_config(), prometheus_url="https://alice:s3cr3t@prom.example:9443/prom").files
    assert not [rel for rel, text in files.items() if "s3cr3t" in text or "alice" in text]
    ds = yaml.safe_load(files["provisioning/datasources/autoscaler.yaml"])["datasources"][0]
    assert ds["url"] == "https://prom.example:9443/prom"
    assert (ds["basicAuth"], ds["basicAuthUser"]) == (True, "${PROMETHEUS_BASIC_AUTH_USER}")
    assert ds["secureJsonData"] == {"basicAuthPassword": "${PROMETHEUS_BASIC_AUTH_PASSWORD}"}
    plain = yaml.safe_load(render(default_config(), prometheus_url="http://prom:9090").files[
        "provisioning/datasources/autoscaler.yaml"])["datasources"][0]
    assert plain["url"] == "http://prom:9090" and "basicAuth" not in plain


def test_export_removes_what_an_earlier_export_wrote_and_nothing_else(tmp_path: Path) -> None:
    """A file the previous export listed and this one does not write is removed; a file the user put
    there is kept; every file is written whole (no temporary file left)."""
    out = tmp_path / "bundle"
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(out)])
    assert res.exit_code == 0, res.output
    listed = (out / ".autoscaler-bundle").read_text().split()
    assert sorted(listed) == sorted(render(default_config()).files)
    (out / "dashboards" / "retired-board.json").write_text("{}")  # as an older release's export left it
    (out / ".autoscaler-bundle").write_text("\n".join([*listed, "dashboards/retired-board.json"]) + "\n")
    (out / "dashboards" / "mine.json").write_text("{}")  # the user's own, never listed
    outside = tmp_path / "victim.txt"  # a manifest edited to name a file elsewhere: never removed
    outside.write_text("x")
    with (out / ".autoscaler-bundle").open("a") as manifest:
        manifest.write(f"{outside}\n../victim.txt\n")
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not (out / "dashboards" / "retired-board.json").exists() and (out / "dashboards" / "mine.json").exists()
    assert outside.read_text() == "x"
    assert not list(out.rglob(".*.tmp-*"))


def test_clear_removes_a_killed_runs_temporary_files(tmp_path: Path) -> None:
    from autoscaler.files import clear

    (tmp_path / ".results.json.tmp-4242").write_text("{half")
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "keep.txt").write_text("x")
    clear(tmp_path, ["results.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_refused_not_read_as_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    out: str) -> None:
    # export meant to refuse an empty --out, but typer made '' Path('.'), whose text is '.', not empty: the
    # bundle's 10 files went into the working directory (an unset $OUT in a script), exit 0
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", out])
    assert res.exit_code == 2, res.output
    # the shared Command.parse_args hook refuses both, the empty value and a blank one, for any command
    assert res.output.strip() == "error: --out is empty: name where to write"
    assert list(tmp_path.iterdir()) == []
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", "."])  # the working directory, named: taken
    assert res.exit_code == 0 and "wrote 10 files under ." in res.output, res.output


def test_export_help_names_every_top_level_entry_it_writes(tmp_path: Path) -> None:
    # what an export writes at the top of --out, read off the disk, against the option's help
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    written = sorted(p.name + ("/" if p.is_dir() else "") for p in tmp_path.iterdir())
    assert written == [".autoscaler-bundle", "dashboards/", "kubernetes/", "provisioning/", "rules/"]
    from typer.main import get_command

    cmd = get_command(app).commands["dashboards"].commands["export"]  # type: ignore[attr-defined]
    out_help = next(p.help for p in cmd.params if p.name == "out")
    assert all(name in out_help for name in written), out_help


def test_export_into_a_file_names_out_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    res = CliRunner().invoke(app, ["dashboards", "export", "--out", str(tmp_path / "f")])
    assert res.exit_code == 2
    assert res.stderr == f"error: --out {tmp_path / 'f'}: exists and is not a directory\n"
