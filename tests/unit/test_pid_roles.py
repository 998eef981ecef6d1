"""The PID per prefill/decode pool and its ratio guard (controllers.pid, controllers.roles), and the loop's
plumbing for a controller that scales the pools (autoscaler.loop.runner): each decision worked out by hand
from the PID's defaults (kp 0.2, ki 0.005/s, deadband 0.25, error clip 3, setpoint 0.3, tick 15 s).

Kthena's ratio cases follow its rule (volcano-sh/kthena at 3cc0572,
pkg/autoscaler/algorithm/disaggregated_ratio.go ``EnforceRoleRatio``), worked out by hand.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from support.recording import RecordingActuator

from autoscaler.config import PDRatio, PIDConfig
from autoscaler.config.loading import parse_config
from autoscaler.dryrun import Shadow, tick_json
from autoscaler.errors import ConfigError
from autoscaler.loop.runner import ControlLoop
from autoscaler.state import PoolObservation, ServiceEstimate, ServiceObservation, Signals, VariantObservation
from autoscaler.timeline import tick_row
from controllers.base import Reason
from controllers.pid import DECODE_KV_SETPOINT, PIDController
from controllers.registry import build
from controllers.roles import enforce_ratio, ratio_reachable

SLO = {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}}


def variant(name: str, current: int = 2, lo: int = 1, hi: int = 8) -> dict[str, Any]:
    return {"name": name, "gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "min_replicas": lo, "max_replicas": hi,
            "initial_replicas": current, "kv_cache_tokens": 400_000, "profile": "llama-3-8b/h100-sxm"}


def doc(ratio: dict[str, float] | None = None, hi: int = 8, current: int = 2) -> dict[str, Any]:
    roles: dict[str, Any] = {"prefill": [variant("p", current, hi=hi)], "decode": [variant("d", current, hi=hi)]}
    if ratio is not None:
        roles["ratio"] = ratio
    return {"services": [{"name": "svc", "model": "m", "slo": SLO, "variants": [], "roles": roles}],
            "controller": {"tick_s": 15, "window_s": 60}}


def pool(role: str, name: str, ready: int, **signals: float) -> PoolObservation:
    return PoolObservation(role, Signals(**signals), {name: VariantObservation(ready, 0)})


def estimate(prefill: PoolObservation, decode: PoolObservation, w_p: float = 10.0, w_d: float = 5.0) -> ServiceEstimate:
    return ServiceEstimate("svc", 100.0, Signals(), {}, {}, False, 0.0, 0.0, 0,
                           pools={"prefill": prefill, "decode": decode}, pool_weights={"p": w_p, "d": w_d})


def test_the_decode_kv_setpoint_is_wvas_saturation_at_the_deadbands_edge() -> None:
    assert DECODE_KV_SETPOINT * (1 + PIDConfig().deadband) == pytest.approx(0.80)


def test_each_pool_runs_its_own_loop_by_hand() -> None:
    # prefill: 2 replicas of 10 req/s, TTFT 1.2 s of 2 s -> y 0.6, e = 0.6/0.3 - 1 = 1.0;
    #   P = 0.2 x 20 x 1 = 4, I = 20 + 0.005 x 20 x 1 x 15 = 21.5, u = 25.5 -> ceil(25.5 / 10) = 3 replicas.
    # decode: 2 replicas of 5 req/s, ITL 0.02 / 0.1 = 0.2, KV 0.96 -> 0.3 x 0.96 / 0.64 = 0.45 (the larger),
    #   e = 0.45/0.3 - 1 = 0.5; P = 0.2 x 10 x 0.5 = 1, I = 10 + 0.005 x 10 x 0.5 x 15 = 10.375,
    #   u = 11.375 -> ceil(11.375 / 5) = 3 replicas.
    svc = parse_config(doc(), "<pd>").services[0]
    pid = PIDController(PIDConfig(), 15.0, 60.0)
    d = pid.decide(estimate(pool("prefill", "p", 2, ttft_mean_s=1.2), pool("decode", "d", 2, tpot_mean_s=0.02,
                                                                             kv_usage=0.96)), svc)
    assert d.desired == {"p": 3, "d": 3}
    assert d.code is Reason.SCALE_UP
    assert d.terms["prefill_error"] == pytest.approx(1.0)
    assert d.terms["prefill_p"] == pytest.approx(4.0)
    assert d.terms["prefill_i"] == pytest.approx(21.5)
    assert d.terms["decode_measurement"] == pytest.approx(0.45)
    assert d.terms["decode_i"] == pytest.approx(10.375)


def test_a_pool_inside_the_deadband_keeps_its_count_and_the_other_moves() -> None:
    # prefill TTFT 0.66 / 2 = 0.33 -> e = 0.1, inside the 0.25 band: 2 stays.
    # decode ITL 0.06 / 0.1 = 0.6 -> e = 1.0: P = 0.2 x 10 = 2, I = 10 + 0.75 = 10.75, u = 12.75 -> 3.
    svc = parse_config(doc(), "<pd>").services[0]
    d = PIDController(PIDConfig(), 15.0, 60.0).decide(
        estimate(pool("prefill", "p", 2, ttft_mean_s=0.66), pool("decode", "d", 2, tpot_mean_s=0.06, kv_usage=0.1)),
        svc)
    assert d.desired == {"p": 2, "d": 3}


def test_both_pools_unknown_hold() -> None:
    svc = parse_config(doc(), "<pd>").services[0]
    d = PIDController(PIDConfig(), 15.0, 60.0).decide(estimate(pool("prefill", "p", 2), pool("decode", "d", 2)), svc)
    assert d.hold and d.desired == {"p": 2, "d": 2}


def test_the_ratio_guard_raises_the_deficient_pool() -> None:
    # The loops ask for p 3, d 3 (as above); max_ratio 0.5 -> 3/3 = 1 > 0.5: decode raised to ceil(3 / 0.5) = 6.
    svc = parse_config(doc(ratio={"min_ratio": 0.25, "max_ratio": 0.5}), "<pd>").services[0]
    d = PIDController(PIDConfig(), 15.0, 60.0).decide(
        estimate(pool("prefill", "p", 2, ttft_mean_s=1.2), pool("decode", "d", 2, tpot_mean_s=0.02, kv_usage=0.96)),
        svc)
    assert d.desired == {"p": 3, "d": 6}
    assert "ratio guard: prefill:decode 3:3 -> 3:6" in d.reason


def test_the_ratio_guard_lowers_the_other_pool_when_the_deficient_one_is_at_its_cap() -> None:
    # max 4 per pool: decode cannot reach 6, so it goes to 4 and prefill to floor(0.5 x 4) = 2.
    svc = parse_config(doc(ratio={"min_ratio": 0.25, "max_ratio": 0.5}, hi=4), "<pd>").services[0]
    d = PIDController(PIDConfig(), 15.0, 60.0).decide(
        estimate(pool("prefill", "p", 2, ttft_mean_s=1.2), pool("decode", "d", 2, tpot_mean_s=0.02, kv_usage=0.96)),
        svc)
    assert d.desired == {"p": 2, "d": 4}


@pytest.mark.parametrize(("p", "d", "lo", "hi", "p_bounds", "d_bounds", "expected"), [
    (3, 3, 0.25, 1.0, (1, 8), (1, 16), (3, 3)),      # inside: unchanged
    (1, 8, 0.25, 1.0, (1, 8), (1, 16), (2, 8)),      # 1/8 < 0.25: prefill raised to ceil(0.25 x 8) = 2
    (6, 2, 0.25, 1.0, (1, 8), (1, 16), (6, 6)),      # 6/2 > 1: decode raised to ceil(6 / 1) = 6
    (8, 2, 0.25, 1.0, (1, 8), (1, 4), (4, 4)),       # decode capped at 4: prefill lowered to floor(1 x 4) = 4
    (1, 16, 0.5, 1.0, (1, 4), (1, 16), (4, 8)),      # prefill capped at 4: decode lowered to floor(4 / 0.5) = 8
    (0, 0, 0.25, 1.0, (0, 8), (0, 16), (0, 0)),      # both zero: a coupled scale to zero
    (0, 4, 0.25, 1.0, (0, 8), (0, 16), (1, 4)),      # one side zero is seeded to one, then 1/4 = 0.25 holds
    (20, 3, 0.25, 1.0, (1, 8), (1, 16), (8, 8)),     # clamped to its bounds first: 8/3 > 1 -> decode 8
])
def test_enforce_ratio_is_kthenas_rule(p: int, d: int, lo: float, hi: float, p_bounds: tuple[int, int],
                                       d_bounds: tuple[int, int], expected: tuple[int, int]) -> None:
    assert enforce_ratio(p, d, PDRatio(min_ratio=lo, max_ratio=hi), p_bounds, d_bounds) == expected


def test_a_bad_ratio_is_a_one_line_error() -> None:
    with pytest.raises(Exception, match="min_ratio"):
        parse_config(doc(ratio={"min_ratio": 2.0, "max_ratio": 1.0}), "<pd>")


def test_a_min_ratio_with_a_prefill_pool_that_cannot_grow_is_refused() -> None:
    # enforce_ratio(0, 4, [0.25, 1], prefill (0, 0), decode (0, 16)) = (0, 0): the decode pool would be
    # held at its minimum (here 0) whatever the load; the file is refused instead.
    assert enforce_ratio(0, 4, PDRatio(min_ratio=0.25, max_ratio=1.0), (0, 0), (0, 16)) == (0, 0)
    d = doc(ratio={"min_ratio": 0.25, "max_ratio": 1.0})
    d["services"][0]["roles"]["prefill"][0].update(min_replicas=0, max_replicas=0, initial_replicas=0)
    with pytest.raises(ConfigError, match=r"ratio.min_ratio \(0.25\) > 0 but every prefill variant"):
        parse_config(d, "<pd>")
    d["services"][0]["roles"]["ratio"] = {"min_ratio": 0.0, "max_ratio": 1.0}  # no lower bound: accepted
    parse_config(d, "<pd>")


def test_a_ratio_no_replica_counts_within_the_pools_bounds_keep_is_refused() -> None:
    # both pools 1..8 replicas (``doc``): prefill / decode is at least 1/8 and at most 8, so a ratio of
    # 10 to 20 (or 0 to 0.1) holds for no whole (P, D); the MPC's plan left it out, the PID clamped, silently
    for lo, hi in ((10.0, 20.0), (0.0, 0.1)):
        with pytest.raises(ConfigError, match=rf"ratio \({lo:g} to {hi:g} prefill per decode replica\) cannot hold "
                                               r"within the pools' bounds \(prefill 1 to 8, decode 1 to 8"):
            parse_config(doc(ratio={"min_ratio": lo, "max_ratio": hi}), "<pd>")
    assert not ratio_reachable(PDRatio(min_ratio=10.0, max_ratio=20.0), (1, 8), (1, 8))  # the plan's own test
    parse_config(doc(ratio={"min_ratio": 8.0, "max_ratio": 20.0}), "<pd>")  # (8, 1) keeps it: accepted
    parse_config(doc(ratio={"min_ratio": 0.0, "max_ratio": 0.125}), "<pd>")  # (1, 8)


def test_a_pool_service_whose_decode_pool_cannot_grow_is_refused_naming_the_pool() -> None:
    # the prefill pool may grow to 8, the decode pool to 0: the message named "every variant", not the pool
    d = doc()
    d["services"][0]["roles"]["decode"][0].update(min_replicas=0, max_replicas=0, initial_replicas=0)
    with pytest.raises(ConfigError, match=r"services\[svc\]: every decode pool variant has max_replicas \(or quota"):
        parse_config(d, "<pd>")


def _every_pair(ratio: PDRatio, p_bounds: tuple[int, int], d_bounds: tuple[int, int]) -> bool:
    """Brute force: whether any whole (P, D) within the bounds keeps the ratio (1e-9 slack, as the schema)."""
    return any(ratio.min_ratio * d - 1e-9 <= p <= ratio.max_ratio * d + 1e-9
               for d in range(d_bounds[0], d_bounds[1] + 1) for p in range(p_bounds[0], p_bounds[1] + 1))


@pytest.mark.parametrize("lo, hi", [(0.0, 0.1), (0.25, 0.3), (1 / 3, 1 / 3), (0.5, 0.5), (0.7, 1.0), (1.0, 1.5),
                                    (2.5, 2.5), (3.0, 7.0), (10.0, 20.0)])
def test_ratio_reachable_agrees_with_every_pair(lo: float, hi: float) -> None:
    r = PDRatio(min_ratio=lo, max_ratio=hi)
    for p_bounds in ((0, 0), (0, 3), (2, 5), (5, 5), (7, 12), (11, 20)):
        for d_bounds in ((0, 0), (0, 4), (1, 1), (1, 8), (3, 9), (6, 15)):
            assert ratio_reachable(r, p_bounds, d_bounds) == _every_pair(r, p_bounds, d_bounds), (p_bounds, d_bounds)


def test_ratio_reachable_with_an_unbounded_decode_pool() -> None:
    # max_replicas has no upper bound: prefill 5 replicas, decode up to 10^15, a ratio of 10 to 20 keeps no
    # (P, D) (D = 0 needs P = 0; D >= 1 needs P >= 10). The check tried every D (minutes at 10^9); a fleet
    # file with such a ratio hung its loading instead of the one-line refusal
    assert not ratio_reachable(PDRatio(min_ratio=10.0, max_ratio=20.0), (5, 5), (0, 10**15))
    # ... and one kept only at D = 10^12 (P = 10^12, ratio 1): found
    assert ratio_reachable(PDRatio(min_ratio=1.0, max_ratio=1.0), (10**12, 10**12), (0, 10**15))
    with pytest.raises(ConfigError, match=r"cannot hold within the pools' bounds \(prefill 1 to 8, decode 1 to "):
        d = doc(ratio={"min_ratio": 10.0, "max_ratio": 20.0})
        d["services"][0]["roles"]["decode"][0]["max_replicas"] = 10**15
        parse_config(d, "<pd>")


# ------------------------------------------------------------------------------ the loop's plumbing
class _Source:
    """One service of pools only, both pools 1 replica: prefill TTFT 4 s of 2 s, decode ITL 0.2 s of 0.1 s
    (both errors at the clip)."""

    def observe(self, now: float) -> dict[str, ServiceObservation]:
        sig = Signals(request_rate_rps=5.0, running=4.0, queue_length=3.0)
        return {"svc": ServiceObservation("svc", now, sig, {}, history_s=now, pools={
            "prefill": pool("prefill", "p", 1, ttft_mean_s=4.0),
            "decode": pool("decode", "d", 1, tpot_mean_s=0.2, kv_usage=0.5)})}


def test_the_loop_writes_each_pool_as_its_own_target() -> None:
    # Each pool's error is at the clip (3): u = s (1 + 0.2 x 3 + 0.005 x 3 x 15) = 1.825 s for s its one
    # replica's capacity -> ceil(1.825) = 2 replicas of each pool, whatever the capacity: two writes.
    cfg = parse_config(doc(current=1), "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, _Source(), act, build("pid", cfg))
    loop.start(0.0)
    rec = loop.tick(75.0)
    st = rec.services["svc"]
    assert act.writes == [("svc", "p", 2), ("svc", "d", 2)]
    assert st.pool_applied == {"p": 2, "d": 2}
    assert st.applied == {}
    assert set(st.actuation) == {"p", "d"}


def test_a_controller_that_does_not_scale_roles_holds_a_service_of_pools_only() -> None:
    cfg = parse_config(doc(current=1), "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, _Source(), act, build("wva", cfg))
    loop.start(0.0)
    st = loop.tick(75.0).services["svc"]
    assert st.decision.code is Reason.FIXED and st.decision.hold
    assert act.writes == [] and st.pool_applied == {}
    assert st.estimate.pools == {}  # it is shown none of them


def test_a_pool_scale_down_is_guarded_by_the_cool_down() -> None:
    # Tick 1 scales both pools up (as above: each integral 1.225 w, w one replica's capacity). Tick 2, both
    # at 2 replicas and calm: prefill e = -1: I = 1.225 w - 0.005 x 2w x 0.5 x 15 = 1.15 w, P = -0.2 x 2w x
    # 0.5 = -0.2 w, u = 0.95 w -> 1 replica; decode ITL 0.01/0.1 -> e = -2/3: I = 1.175 w, P = -0.133 w,
    # u = 1.042 w -> still 2. The prefill pool's scale-down is held by the 180-s cool-down, named so.
    class Calm(_Source):
        calls = 0

        def observe(self, now: float) -> dict[str, ServiceObservation]:
            Calm.calls += 1
            if Calm.calls == 1:
                return super().observe(now)
            sig = Signals(request_rate_rps=5.0, running=4.0, queue_length=0.0)
            return {"svc": ServiceObservation("svc", now, sig, {}, history_s=now, pools={
                "prefill": pool("prefill", "p", 2, ttft_mean_s=0.01, running=2.0, queue_length=0.0),
                "decode": pool("decode", "d", 2, tpot_mean_s=0.01, kv_usage=0.01, running=2.0, queue_length=0.0)})}

    cfg = parse_config(doc(current=1), "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, Calm(), act, build("pid", cfg))
    loop.start(0.0)
    loop.tick(75.0)
    st = loop.tick(90.0).services["svc"]
    assert act.writes == [("svc", "p", 2), ("svc", "d", 2)]
    assert st.decision.desired == {"p": 1, "d": 2}
    assert st.limits == [Reason.COOLDOWN]
    assert "prefill: p: scale-down held by cool-down" in st.reason


def test_a_service_of_pools_only_at_zero_with_requests_waiting_scales_each_pool_from_zero() -> None:
    # No replica of either pool, 7 requests waiting: no latency signal can ever appear, so the loop
    # raises one replica of each pool (its only variant), as it does one aggregated replica.
    class Empty(_Source):
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            sig = Signals(request_rate_rps=0.0, running=0.0, queue_length=7.0)
            return {"svc": ServiceObservation("svc", now, sig, {}, history_s=now, pools={
                "prefill": pool("prefill", "p", 0), "decode": pool("decode", "d", 0)})}

    doc_ = doc(current=0)
    for role in ("prefill", "decode"):
        doc_["services"][0]["roles"][role][0]["min_replicas"] = 0
    cfg = parse_config(doc_, "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, Empty(), act, build("pid", cfg))
    loop.start(0.0)
    st = loop.tick(15.0).services["svc"]  # inside the warm-up window: the rule comes first, as for variants
    assert st.decision.code is Reason.SCALE_FROM_ZERO
    assert act.writes == [("svc", "p", 1), ("svc", "d", 1)]
    assert st.pool_applied == {"p": 1, "d": 1}


def test_no_aggregated_variant_is_scaled_from_zero_while_the_pools_serve() -> None:
    # The aggregated variant at 0 (its minimum) and both pools serving with 3 requests queued: the
    # service is not at zero, so no scale-from-zero of the aggregated variant.
    doc_ = doc(current=1)
    doc_["services"][0]["variants"] = [variant("agg", 0, lo=0)]

    class Pools(_Source):
        def observe(self, now: float) -> dict[str, ServiceObservation]:
            obs = super().observe(now)["svc"]
            obs.variants["agg"] = VariantObservation(0, 0)
            return {"svc": obs}

    cfg = parse_config(doc_, "<pd>")
    act = RecordingActuator()
    loop = ControlLoop(cfg, Pools(), act, build("pid", cfg))
    loop.start(0.0)
    st = loop.tick(15.0).services["svc"]
    assert st.decision.code is Reason.WARMING_UP
    assert act.writes == []


def test_the_timeline_row_has_each_pool_variants_counts() -> None:
    # As test_the_loop_writes_each_pool_as_its_own_target: both pools at 1 ready, the PID asks 2 each.
    cfg = parse_config(doc(current=1), "<pd>")
    loop = ControlLoop(cfg, _Source(), RecordingActuator(), build("pid", cfg))
    loop.start(0.0)
    row = tick_row(75.0, "svc", loop.tick(75.0).services["svc"], 5.0)
    assert {k: row[k] for k in ("ready_p", "starting_p", "desired_p", "ready_d", "starting_d", "desired_d")} \
        == {"ready_p": 1, "starting_p": 0, "desired_p": 2, "ready_d": 1, "starting_d": 0, "desired_d": 2}


def test_the_dry_run_shows_the_pid_the_pools_and_prints_them() -> None:
    # dry-run wraps the controller in a Shadow; the loop reads scales_roles off the Shadow, so before it
    # held a pools-only service ("this controller does not scale the prefill/decode pools") and its
    # output had no pool variant. As test_the_loop_writes_each_pool_as_its_own_target: 2 replicas each.
    cfg = parse_config(doc(current=1), "<pd>")
    loop = ControlLoop(cfg, _Source(), None, Shadow(build("pid", cfg)))
    loop.start(0.0)
    rec = loop.tick(75.0)
    st = rec.services["svc"]
    assert st.decision.code is Reason.SCALE_UP and st.pool_applied == {"p": 2, "d": 2}
    run = SimpleNamespace(query_set=lambda name: "vllm", warnings=lambda name, record: [])
    out = tick_json(run, rec, 0.0)["services"]["svc"]["variants"]  # type: ignore[arg-type]
    assert {v: (x["role"], x["current_replicas"], x["desired_replicas"]) for v, x in out.items()} == \
        {"p": ("prefill", 1, 2), "d": ("decode", 1, 2)}
