"""``mpc:cover=1`` (``controllers.mpc.hold_downs_within_start``): no aggregated scale-down while the plan is
short, or wants the replica back, within a cold start. Expectations are hand-computed from the plans
built here and the example fleet's figures (15-s ticks, 300-s cold starts, A100 $1.79/h, H100 $2.99/h)."""

from __future__ import annotations

import numpy as np
import pytest
from support.estimates import service_estimate

from autoscaler.config.loading import default_config
from autoscaler.state import ServiceEstimate
from controllers.mpc import MPCController, cover_window, hold_downs_within_start
from controllers.registry import parse_spec

CFG = default_config()
SVC = CFG.services[0]
WEIGHTS = {v.name: 10.0 for v in SVC.variants}  # every replica serves 10 req/s
H = 40
FLAT = np.zeros(H)


def test_a_short_step_within_the_window_holds_every_variant_going_down() -> None:
    desired, current = {"h100": 3, "gh200": 2, "a100": 1}, {"h100": 4, "gh200": 3, "a100": 1}
    plan = {"h100": np.full(H, 3.0), "gh200": np.full(H, 2.0), "a100": np.full(H, 1.0)}
    short = FLAT.copy()
    short[20] = 5.0  # the window's last step (0..20 for 21 steps)
    assert hold_downs_within_start(desired, current, plan, short, 21) == {"h100": 4, "gh200": 3, "a100": 1}
    assert hold_downs_within_start(desired, current, plan, FLAT, 21) == desired
    later = FLAT.copy()
    later[21] = 5.0  # one step past the window: a replica ordered now is back by then
    assert hold_downs_within_start(desired, current, plan, later, 21) == desired


def test_a_replica_planned_back_within_the_window_is_kept() -> None:
    desired, current = {"h100": 3}, {"h100": 4}
    back = np.array([3.0] * 5 + [4.0] * (H - 5))  # back to 4 at step 5 (75 s): within a cold start
    assert hold_downs_within_start(desired, current, {"h100": back}, FLAT, 21) == {"h100": 4}
    late = np.array([3.0] * 21 + [4.0] * (H - 21))  # back at step 21: after the window
    assert hold_downs_within_start(desired, current, {"h100": late}, FLAT, 21) == {"h100": 3}


def test_scale_ups_and_steady_counts_pass_untouched() -> None:
    short = np.full(H, 2.0)
    assert hold_downs_within_start({"h100": 5}, {"h100": 4}, {"h100": np.full(H, 5.0)}, short, 21) == {"h100": 5}
    assert hold_downs_within_start({"h100": 4}, {"h100": 4}, {"h100": np.full(H, 4.0)}, short, 21) == {"h100": 4}


def test_bad_window_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="window"):
        hold_downs_within_start({"h100": 3}, {"h100": 4}, {"h100": np.full(H, 3.0)}, FLAT, 0)
    with pytest.raises(ValueError, match="dt_s"):
        cover_window(SVC.variants, 0.0)


def test_the_window_is_the_slowest_cold_start_plus_a_step() -> None:
    assert cover_window(SVC.variants, 15.0) == 300 // 15 + 1  # 21
    slow = [*SVC.variants[:-1], SVC.variants[-1].model_copy(update={"startup_cold_s": 310.0})]
    assert cover_window(slow, 15.0) == 21 + 1  # ceil(310 / 15) = 21, plus one


ONLY_A100 = {v: 10.0 if v == "a100" else 0.0 for v in WEIGHTS}


def _estimate(t: float, rate: float, a100: int) -> ServiceEstimate:
    # one GH200 ready: the example fleet's minimum for it (``min_replicas: 1``); it serves nothing here
    return service_estimate(SVC, ONLY_A100, t, rate, {"a100": a100, "gh200": 1}, capacity=10.0 * a100)


def test_the_plan_trades_a_short_step_for_a_replica_unless_cover_holds_it() -> None:
    # Six A100s (10 req/s each) at 50 req/s; the true demand is 50 req/s but for one step, 8 steps
    # (120 s) ahead, at 51. Keeping the sixth through that step costs 9 steps x 15 s x $1.79/h =
    # $0.067; leaving 1 req/s unserved for 15 s costs 15 x the miss price (10 x the A100's $1.79/h
    # over 10 req/s = $5.0e-4 a request) = $0.0075; a replica removed now cannot be back before 300 s
    # (six A100s fill the four warm nodes). Only A100s serve (the others' capacity 0: none swapped in).
    # So the plan removes one A100 now and plans the step short; with cover=1 the six stay.
    tick = round(600.0 / 15.0)
    future = np.full(200, 50.0)
    future[tick + 1 + 8] = 51.0  # demand()'s steps start at the tick after this one

    def decide(cover: int) -> dict[str, int]:
        c = MPCController(CFG, {SVC.name: ONLY_A100}, forecast="perfect", hold_s=0.0, cover=cover,
                          future_rps={SVC.name: future})
        return c.decide(_estimate(600.0, 50.0, 6), SVC).desired
    assert decide(0) == {"h100": 0, "a100": 5, "gh200": 1}
    assert decide(1) == {"h100": 0, "a100": 6, "gh200": 1}


def test_cover_is_a_spec_option_and_only_0_or_1() -> None:
    assert parse_spec("mpc:hold_s=0:cover=1") == ("mpc", {"hold_s": 0.0, "cover": 1})
    with pytest.raises(ValueError, match="cover"):
        MPCController(CFG, {SVC.name: WEIGHTS}, cover=2)
