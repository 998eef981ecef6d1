"""``autoscaler simulate`` streams a trace by default (issue 33): the same results as ``--whole``.

The shipped scenarios' traces over a span (``servegen-day``'s ServeGen folder with Mooncake lengths,
Azure conv, Mooncake conv), run streamed and whole: ``results.json`` (less the wall-clock figures)
and ``timeline.csv`` are the same bytes. A malformed line gives the same one-line error either way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.cli import app

DATA = ROOT.parent / "shared" / "data"
RUNS = {
    "servegen-day": ["--trace", str(DATA / "servegen/language/m-large"), "--span", "86400:86580", "--lengths-from",
                     str(DATA / "mooncake/conversation_trace.jsonl"), "--rate-scale", "0.06"],
    "azure-conv": ["--trace", str(DATA / "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"), "--span", "0:300"],
    "mooncake-conv": ["--trace", str(DATA / "mooncake/conversation_trace.jsonl"), "--span", "600:900",
                      "--rate-scale", "0.8"],
}


def run(args: list[str], out: Path) -> tuple[str, str]:
    """sha256 of the run's results.json (wall-clock figures dropped) and of its timeline.csv."""
    res = CliRunner().invoke(app, ["simulate", *args, "--out", str(out), "--seed", "2"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "results.json").read_text())
    del doc["wall_s"], doc["simulated_requests_per_s"]
    assert doc["requests"]["total"] > 100
    return (hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(),
            hashlib.sha256((out / "timeline.csv").read_bytes()).hexdigest())


@pytest.mark.parametrize("name", sorted(RUNS))
def test_streamed_simulate_is_the_whole_run(name: str, tmp_path: Path) -> None:
    assert run(RUNS[name], tmp_path / "stream") == run([*RUNS[name], "--whole"], tmp_path / "whole")


def test_malformed_line_gives_the_same_error_streamed_or_whole(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n\n"
                     "2023-11-16 18:15:47.1,12,-3\n")
    outputs = []
    for extra in ([], ["--whole"]):
        res = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path / "o"), *extra])
        assert res.exit_code != 0
        outputs.append(res.output)
    assert outputs[0] == outputs[1]
    assert f"{trace}: line 4: GeneratedTokens is negative (-3)" in " ".join(outputs[0].split())


def test_help_names_the_whole_option() -> None:
    res = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--whole" in res.output and "streamed" in res.output


@pytest.mark.parametrize(("extra", "streamed"), [([], True), (["--whole"], False),
                                                 (["--controller", "oracle"], False), (["--rate-scale", "2"], True)])
def test_what_simulate_streams(extra: list[str], streamed: bool, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import autoscaler.simulate as simulate_module
    from autoscaler.workload.stream import WorkloadStream

    seen = []
    real = simulate_module.run_simulation

    def spy(cfg, workload, *a, **kw):
        seen.append(isinstance(workload, WorkloadStream))
        return real(cfg, workload, *a, **kw)

    monkeypatch.setattr(simulate_module, "run_simulation", spy)
    res = CliRunner().invoke(app, ["simulate", *RUNS["azure-conv"][:2], "--span", "0:60", *extra,
                                   "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert seen == [streamed]
