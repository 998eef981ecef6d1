"""The shipped benchmark scenarios (``benchmarks/scenarios/*.yaml``) and their fleet patches."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.paths import ROOT

from autoscaler.compare import check_names
from autoscaler.config.loading import parse_config

SPEC = importlib.util.spec_from_file_location("bench_compare", ROOT / "benchmarks" / "compare.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)
SCENARIOS = sorted((ROOT / "benchmarks" / "scenarios").glob("*.yaml"))


def test_merge_by_key_and_by_name() -> None:
    base = {"a": 1, "sim": {"engine": {"x": 1, "y": 2}},
            "services": [{"name": "s", "k": 1, "v": [{"name": "g", "n": 1}]}]}
    patch = {"sim": {"engine": {"y": 3}}, "services": [{"name": "s", "v": [{"name": "g", "n": 5}, {"name": "h"}]}]}
    assert bench.merged(base, patch) == {
        "a": 1, "sim": {"engine": {"x": 1, "y": 3}},
        "services": [{"name": "s", "k": 1, "v": [{"name": "g", "n": 5}, {"name": "h"}]}],
    }
    assert base["sim"]["engine"]["y"] == 2  # the base is not modified
    assert bench.merged([1, 2], [3]) == [3]  # plain lists are replaced


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_names_a_valid_fleet_and_controllers(path: Path) -> None:
    sc = yaml.safe_load(path.read_text())
    assert sc["name"] == path.stem
    cfg = parse_config(bench.scenario_fleet(sc), path.name)
    check_names(sc["controllers"])
    if path.stem.startswith("surge"):  # the admission benchmark: both scaling controllers under each policy,
        # and the MPC planning shedding with scaling (README's tour names it: mpc:shed=1 --admission mpc)
        assert set(sc["controllers"]) == {f"{c}@{a}" for c in ("pid", "mpc") for a in ("none", "pid", "mpc")} | {
            "mpc:shed=1@mpc"}
        assert cfg.simulator.client_timeout_s == 30.0
        assert cfg.simulator.clients.streaming and cfg.simulator.clients.max_retries == 2
        return
    assert {"mpc", "oracle", "pid", "static"} <= set(sc["controllers"])
    if path.stem == "azure-code":
        assert cfg.engine.max_num_batched_tokens == 2048
    if path.stem.startswith("servegen-day"):
        assert cfg.services[0].max_model_len == 131072 and sc["span"][1] - sc["span"][0] == 86400


def test_surge_workload_is_what_its_scenario_says() -> None:
    sc = yaml.safe_load((ROOT / "benchmarks" / "scenarios" / "surge.yaml").read_text())
    wl = bench.scenario_workload(sc, ROOT)
    t = np.array([r.arrival_s for r in wl.requests])
    # request rate in the steady part and the surge, away from the edges (think times smear ~40 s)
    base = ((t > 300) & (t < 850)).sum() / 550
    surge = ((t > 1000) & (t < 1500)).sum() / 500
    assert base == pytest.approx(30.0, rel=0.06) and surge == pytest.approx(90.0, rel=0.06)
    steps = Counter(r.workflow_id for r in wl.requests)
    assert set(steps.values()) <= {3, 4, 5} and len(set(steps.values())) == 3
    by_wf: dict[int, set[int]] = {}
    for r in wl.requests:
        by_wf.setdefault(r.workflow_id, set()).add(r.priority)
    assert all(len(p) == 1 for p in by_wf.values())
    share = Counter(next(iter(p)) for p in by_wf.values())
    n = len(by_wf)
    assert share[0] / n == pytest.approx(0.2, abs=0.03) and share[2] / n == pytest.approx(0.2, abs=0.03)


def test_the_admission_benchmark_refuses_a_bad_row_before_any_run(tmp_path: Path) -> None:
    # A bad spec or policy in the last row is one usage line (exit 2) before any row runs, as with
    # `autoscaler compare`; it was a worker's traceback after the rows before it had run.
    import subprocess
    import sys

    for rows, why in (("mpc@mpc,mpc:shed=2@pid", "mpc shed must be in [0, 1], got 2"),
                      ("mpc@mpc,mpc:shed=1@bogus", "unknown admission policy 'bogus'")):
        res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "admission.py"), "--scenario", "surge.yaml",
                              "--seeds", "0", "--rows", rows, "--workers", "1", "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert res.stderr.strip().splitlines()[-1].startswith("admission.py: error: --rows: ")
        assert why in res.stderr and not (tmp_path / "out").exists()


def test_the_admission_benchmark_refuses_bad_arguments_before_any_run(tmp_path: Path) -> None:
    # Each was a traceback (or a silent default), some after every run had finished: now one usage
    # line and exit 2 before any run, and nothing written.
    import subprocess
    import sys

    (tmp_path / "afile").write_text("not a folder")
    for args, why in ((["--scenario", "step.yaml"], "no surge window"),
                      (["--seeds=-1"], "--seeds takes comma-separated integers >= 0"),
                      (["--seeds="], "--seeds is empty"),
                      (["--rows="], "--rows is empty"),
                      (["--out", str(tmp_path / "afile")], "not a folder")):
        argv = ["--scenario", "surge-chat.yaml", "--workers", "1", "--out", str(tmp_path / "out"), *args]
        res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "admission.py"), *argv],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert why in res.stderr.strip().splitlines()[-1], res.stderr
        assert not (tmp_path / "out").exists()


def test_the_compare_benchmark_takes_controller_as_the_cli_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``--controller a,b`` as ``autoscaler compare``; the old ``--controllers`` reads the same with the
    CLI's deprecation warning; both at once, or an unknown name, is a usage error before any run."""
    assert bench.parse_args(["step", "--controller", "pid,mpc:shed=1"]).controllers == ["pid", "mpc:shed=1"]
    assert bench.parse_args(["step"]).controllers is None  # the scenario's own
    capsys.readouterr()
    assert bench.parse_args(["--controllers", "pid,hpa"]).controllers == ["pid", "hpa"]
    assert "--controllers is deprecated and will be removed: use --controller" in capsys.readouterr().err
    for argv, why in ((["--controller", "pid", "--controllers", "hpa"], "--controllers is the old spelling"),
                      (["--controller", "pid,nope"], "unknown controller 'nope'"),
                      (["--controller", "pid,,hpa"], "an empty entry")):
        with pytest.raises(SystemExit) as exit_:
            bench.parse_args(argv)
        assert exit_.value.code == 2 and why in capsys.readouterr().err
