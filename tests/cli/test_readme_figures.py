"""README's headline figures are what the embedded default gives today (issue 32, item 1).

README quotes, for the embedded default at seed 0, each of four controllers' SLO attainment (all
requests) and GPU-hours. Those figures move with the code; this test reruns the four controllers, as
``autoscaler compare --controllers pid,static,mpc,oracle`` does, and fails when README and the code
disagree, so the README cannot silently describe older code.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoscaler.compare import run_compare
from autoscaler.config.loading import default_config
from autoscaler.workload.build import DEFAULT_BATCH_FRACTION, build_workload

README = Path(__file__).resolve().parents[2] / "README.md"

# How README names each controller in its headline paragraph, and the compare spec it stands for.
NAMES = {"pid": r"the PID serves", "static": r"static peak provisioning", "mpc": r"the MPC \(",
         "oracle": r"the oracle \("}


def readme_figures(text: str) -> dict[str, tuple[float, float]]:
    """``{spec: (attainment %, GPU-hours)}`` read from README's headline paragraph.

    Raises:
        AssertionError: a controller's figures are not where the paragraph gives them.
    """
    para = text[text.index("On the embedded default (seed 0)"):]
    para = " ".join(para.split("\n\n", 1)[0].split())
    out = {}
    for spec, name in NAMES.items():
        # the first "NN.NN% ... on G.GG" after the controller's name, within its own clause
        m = re.search(name + r"[^%]*?(\d+\.\d\d)\s?%[^,;]*? on (\d+\.\d\d)", para)
        assert m, f"README's headline paragraph gives no attainment and GPU-hours for {spec}"
        out[spec] = (float(m.group(1)), float(m.group(2)))
    return out


def test_the_readme_parser_reads_each_controller_s_own_clause() -> None:
    text = ("On the embedded default (seed 0) the PID serves 99.50% of requests within SLO on 1.25\n"
            "GPU-hours, static peak provisioning 100.00% on 9.02, the MPC (`x`) 98.00% on 3.50,\n"
            "and the oracle (a plan, so not a floor) 97.25% on 2.75; more text.\n\nNext paragraph 1.00% on 9.99")
    assert readme_figures(text) == {"pid": (99.50, 1.25), "static": (100.00, 9.02), "mpc": (98.00, 3.50),
                                    "oracle": (97.25, 2.75)}


@pytest.mark.slow
def test_readme_headline_figures_are_the_embedded_default_s() -> None:
    quoted = readme_figures(README.read_text())
    cfg = default_config()
    wl = build_workload(None, None, 1.0, 1.0, 0, DEFAULT_BATCH_FRACTION, None, None)
    comp = run_compare(cfg, wl, list(quoted), workers=2)
    got = {}
    for row in comp.rows:
        assert not row.get("failed"), row
        got[row["controller"]] = (round(100 * row["slo_attainment"]["all"], 2),
                                  round(row["gpu_hours"]["total"], 2))
    assert got == quoted
