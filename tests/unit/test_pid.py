"""Tests for controllers.pid: pid_step against hand-computed values, anti-windup, track().

Every expected number is worked out in the test from the control law in the module docstring:

    e = clip(measurement/setpoint - 1, -1, error_clip), zeroed inside +-deadband
    gain = down_gain if e < 0 else 1
    s = scale (or current) when scale_with_replicas, else 1
    P = kp*s*e*gain,  I += ki*s*e*gain*dt,  D = kd*s*filtered d(measurement/setpoint)/dt
    output = clamp(I + P + D, out_min, out_max)
"""

from __future__ import annotations

import math

import pytest

from autoscaler.config import PIDConfig
from controllers.pid import PIDController, PIDState, pid_step, track
from controllers.pid_rules import QUEUE_NOISE, queue_growing


def cfg(**kw) -> PIDConfig:
    """PID settings with every shaping feature off unless the test turns it on."""
    base = dict(setpoint=1.0, kp=0.0, ki=0.0, kd=0.0, deadband=0.0, down_gain=1.0, error_clip=3.0,
                derivative_filter_s=30.0, scale_with_replicas=False)
    base.update(kw)
    return PIDConfig(**base)


# ---------------------------------------------------------------------------------------- (a) P only
def test_p_only_step_response() -> None:
    c = cfg(kp=0.5, setpoint=0.5)
    # y = 1.0 / 0.5 = 2 -> e = 2 - 1 = 1; P = 0.5 * 1 * 1 = 0.5; I starts at current = 10 (bumpless).
    out, state, terms = pid_step(c, PIDState(), measurement=1.0, dt=15, current=10, out_min=0, out_max=100)
    assert terms.error == pytest.approx(1.0)
    assert terms.p == pytest.approx(0.5)
    assert terms.i == pytest.approx(10.0)
    assert terms.d == 0.0
    assert out == pytest.approx(10.5)
    assert state.integral == pytest.approx(10.0)
    assert state.prev_measurement == pytest.approx(1.0)


def test_p_only_negative_error_uses_down_gain() -> None:
    c = cfg(kp=0.5, setpoint=0.5, down_gain=0.5)
    # y = 0.25/0.5 = 0.5 -> e = -0.5; P = 0.5 * (-0.5) * down_gain 0.5 = -0.125.
    out, _, terms = pid_step(c, PIDState(), 0.25, 15, current=10, out_min=0, out_max=100)
    assert terms.error == pytest.approx(-0.5)
    assert terms.p == pytest.approx(-0.125)
    assert out == pytest.approx(9.875)


def test_bumpless_start_clamps_initial_integral_to_limits() -> None:
    # current 50 is above out_max 30: the integral starts at 30, and with e = 0 the output is 30.
    out, state, _ = pid_step(cfg(kp=1.0, ki=0.1), PIDState(), 1.0, 15, current=50, out_min=0, out_max=30)
    assert out == pytest.approx(30.0)
    assert state.integral == pytest.approx(30.0)


# ------------------------------------------------------------------------------- (b) integral, 3 steps
def test_integral_accumulates_over_three_steps_with_down_gain() -> None:
    c = cfg(ki=0.1, down_gain=0.5)
    dt, current = 15.0, 10.0
    state = PIDState()
    # step 1: e = 1.5 - 1 = 0.5 ; I = 10 + 0.1*0.5*15 = 10.75
    # step 2: e = 0.5           ; I = 10.75 + 0.75 = 11.5
    # step 3: e = 0.6 - 1 = -0.4; I = 11.5 + 0.1*(-0.4)*0.5*15 = 11.5 - 0.3 = 11.2
    expected = [10.75, 11.5, 11.2]
    for m, want in zip([1.5, 1.5, 0.6], expected, strict=True):
        out, state, terms = pid_step(c, state, m, dt, current, out_min=0, out_max=100)
        assert terms.p == 0.0
        assert state.integral == pytest.approx(want)
        assert out == pytest.approx(want)


def test_integral_gain_scales_with_replicas_when_enabled() -> None:
    c = cfg(ki=0.1, scale_with_replicas=True)
    # s = current = 4: I = 4 + 0.1*4*0.5*15 = 4 + 3 = 7
    out, _, _ = pid_step(c, PIDState(), 1.5, 15, current=4, out_min=0, out_max=100)
    assert out == pytest.approx(7.0)


# ----------------------------------------------------------------------------------- (c) deadband
@pytest.mark.parametrize("measurement", [1.05, 0.95, 1.0999])
def test_deadband_zeroes_small_errors(measurement: float) -> None:
    c = cfg(kp=2.0, ki=0.1, deadband=0.1)
    out, state, terms = pid_step(c, PIDState(), measurement, 15, current=10, out_min=0, out_max=100)
    assert terms.error == 0.0
    assert out == pytest.approx(10.0)
    assert state.integral == pytest.approx(10.0)


def test_error_at_deadband_edge_is_not_shrunk() -> None:
    # |e| = 0.2 >= deadband 0.1: the error passes unchanged (the deadband is not subtracted).
    c = cfg(kp=1.0, deadband=0.1)
    out, _, terms = pid_step(c, PIDState(), 1.2, 15, current=10, out_min=0, out_max=100)
    assert terms.error == pytest.approx(0.2)
    assert out == pytest.approx(10.2)


# ----------------------------------------------------------------------------------- (d) error clip
def test_error_clipped_above_at_error_clip() -> None:
    c = cfg(kp=1.0, error_clip=3.0)
    # y - 1 = 10 - 1 = 9 -> clipped to 3: P = 3.
    out, _, terms = pid_step(c, PIDState(), 10.0, 15, current=10, out_min=0, out_max=100)
    assert terms.error == pytest.approx(3.0)
    assert out == pytest.approx(13.0)


def test_error_clipped_below_at_minus_one() -> None:
    c = cfg(kp=1.0, down_gain=0.5)
    # measurement 0 -> y - 1 = -1 (lower clip); a negative measurement would also give -1.
    # P = 1 * (-1) * 0.5 = -0.5
    for m in (0.0, -5.0):
        out, _, terms = pid_step(c, PIDState(), m, 15, current=10, out_min=0, out_max=100)
        assert terms.error == pytest.approx(-1.0)
        assert out == pytest.approx(9.5)


# ----------------------------------------------------------------------------------- (e) anti-windup
def test_anti_windup_integral_held_at_limit_and_leaves_on_next_negative_step() -> None:
    c = cfg(ki=0.1)
    dt, current, out_max = 10.0, 10.0, 12.0
    state = PIDState()
    naive_integral = current  # un-clamped integrator: I += ki*e*dt every step, no conditional integration
    outs = []
    for _ in range(20):  # e = 1 each step: +1 per step
        out, state, terms = pid_step(c, state, 2.0, dt, current, out_min=0, out_max=out_max)
        naive_integral += 0.1 * 1.0 * dt
        outs.append(out)
        assert state.integral <= out_max
    # 10 -> 11 -> 12 then held at 12 (saturated, not integrated).
    assert outs[:3] == pytest.approx([11.0, 12.0, 12.0])
    assert all(o == pytest.approx(12.0) for o in outs[2:])
    assert state.integral == pytest.approx(12.0)
    assert terms.saturated
    assert naive_integral == pytest.approx(30.0)

    # Error turns negative: e = 0.5 - 1 = -0.5 -> I = 12 + 0.1*(-0.5)*10 = 11.5, below the limit at once.
    out, state, terms = pid_step(c, state, 0.5, dt, current, out_min=0, out_max=out_max)
    assert out == pytest.approx(11.5)
    assert out < out_max
    assert not terms.saturated
    # The un-clamped integrator would still be at 30 - 0.5 = 29.5, i.e. still clamped to 12:
    naive_integral += 0.1 * -0.5 * dt
    assert min(naive_integral, out_max) == pytest.approx(out_max)


def test_anti_windup_at_lower_limit() -> None:
    c = cfg(ki=0.1)
    state = PIDState()
    for _ in range(10):  # e = -1 every step, output pinned at out_min = 8
        out, state, _ = pid_step(c, state, 0.0, 10, current=10, out_min=8, out_max=20)
    assert out == pytest.approx(8.0)
    assert state.integral == pytest.approx(8.0)
    # e = +0.5 -> I = 8 + 0.5 = 8.5: leaves the lower limit on the next step.
    out, state, _ = pid_step(c, state, 1.5, 10, current=10, out_min=8, out_max=20)
    assert out == pytest.approx(8.5)


def test_p_term_saturating_output_stops_integration() -> None:
    # kp alone already pushes the output over out_max: conditional integration freezes I.
    c = cfg(kp=5.0, ki=0.1)
    _, state, terms = pid_step(c, PIDState(), 2.0, 10, current=10, out_min=0, out_max=12)
    # candidate I = 11, P = 5: 16 > 12 and e > 0 -> saturated, I stays at 10.
    assert terms.saturated
    assert state.integral == pytest.approx(10.0)


# ----------------------------------------------------------------------------------- (f) hold_integral
def test_hold_integral_freezes_positive_integration() -> None:
    c = cfg(kp=1.0, ki=0.1)
    # e = 0.5: P = 0.5; I would go 10 -> 10.75 but is held at 10.
    out, state, _ = pid_step(c, PIDState(), 1.5, 15, current=10, out_min=0, out_max=100, hold_integral=True)
    assert state.integral == pytest.approx(10.0)
    assert out == pytest.approx(10.5)


def test_hold_integral_does_not_freeze_negative_integration() -> None:
    c = cfg(ki=0.1)
    # e = -0.5: I = 10 + 0.1*(-0.5)*15 = 9.25 even while holding.
    out, state, _ = pid_step(c, PIDState(), 0.5, 15, current=10, out_min=0, out_max=100, hold_integral=True)
    assert state.integral == pytest.approx(9.25)
    assert out == pytest.approx(9.25)


# ----------------------------------------------------------------------------------- (g) derivative
def test_filtered_derivative_on_measurement_two_steps() -> None:
    c = cfg(kd=2.0, derivative_filter_s=30.0)
    dt = 10.0
    alpha = dt / (30.0 + dt)  # 0.25
    # step 1: no previous measurement -> derivative 0
    out, s, terms = pid_step(c, PIDState(), 1.0, dt, current=10, out_min=0, out_max=100)
    assert terms.d == 0.0 and out == pytest.approx(10.0)
    # step 2: raw = (1.4 - 1.0)/10 = 0.04; filtered = 0 + 0.25*(0.04 - 0) = 0.01; D = 2*0.01 = 0.02
    out, s, terms = pid_step(c, s, 1.4, dt, current=10, out_min=0, out_max=100)
    assert alpha == pytest.approx(0.25)
    assert s.derivative == pytest.approx(0.01)
    assert terms.d == pytest.approx(0.02)
    assert out == pytest.approx(10.02)
    # step 3: raw = 0; filtered = 0.01 + 0.25*(0 - 0.01) = 0.0075; D = 0.015
    out, s, terms = pid_step(c, s, 1.4, dt, current=10, out_min=0, out_max=100)
    assert s.derivative == pytest.approx(0.0075)
    assert terms.d == pytest.approx(0.015)


def test_derivative_uses_normalised_measurement_not_error_band() -> None:
    # The derivative is of the measurement (over the setpoint): a change inside the deadband still
    # moves D, because D differentiates the measurement, not the (deadbanded) error.
    c = cfg(kd=1.0, deadband=0.5, derivative_filter_s=10.0)
    _, s, _ = pid_step(c, PIDState(), 1.0, 10, current=10, out_min=0, out_max=100)
    _, s, terms = pid_step(c, s, 1.2, 10, current=10, out_min=0, out_max=100)
    # raw = 0.2/10 = 0.02; alpha = 10/20 = 0.5 -> 0.01
    assert terms.error == 0.0
    assert terms.d == pytest.approx(0.01)


def test_setpoint_change_causes_no_derivative_kick() -> None:
    # D differentiates the raw measurement (then divides by the setpoint): changing the setpoint
    # from 0.5 to 1.0 while the measurement stays at 0.6 gives raw derivative 0 -> D = 0.
    c1, c2 = cfg(kd=5.0, setpoint=0.5), cfg(kd=5.0, setpoint=1.0)
    _, s, _ = pid_step(c1, PIDState(), 0.6, 10, current=10, out_min=0, out_max=100)
    _, s, terms = pid_step(c2, s, 0.6, 10, current=10, out_min=0, out_max=100)
    assert terms.d == 0.0


def test_derivative_divides_by_current_setpoint() -> None:
    # measurement 0.6 -> 1.2 in 10 s with setpoint 0.5: raw = 0.6/10/0.5 = 0.12/s;
    # alpha = 10/(30+10) = 0.25 -> filtered 0.03; D = kd * 0.03 = 5 * 0.03 = 0.15.
    c = cfg(kd=5.0, setpoint=0.5)
    _, s, _ = pid_step(c, PIDState(), 0.6, 10, current=10, out_min=0, out_max=100)
    _, s, terms = pid_step(c, s, 1.2, 10, current=10, out_min=0, out_max=100)
    assert terms.d == pytest.approx(0.15)


# ----------------------------------------------------------------------------------- (h) track
def test_track_back_calculation() -> None:
    s = PIDState(integral=20.0, prev_measurement=1.0, derivative=0.1)
    t = track(s, -4.0, applied=16.0)  # intended 20, guard let through 16: I = 20 - 4 = 16
    assert t.integral == pytest.approx(16.0)
    assert (t.prev_measurement, t.derivative) == (1.0, 0.1)
    assert track(s, 0.0, applied=20.0) is s
    assert track(PIDState(), -3.0, applied=5.0) == PIDState()


def test_track_never_moves_the_integral_past_the_applied_capacity() -> None:
    # I = 30 wound up, P = 2: intended 32; the step limit lets 26 through -> cut -6 -> 24, clamped to 26.
    assert track(PIDState(integral=30.0), -6.0, applied=26.0).integral == pytest.approx(26.0)
    # I = 20, intended 24 (P = 4), the fleet is held at 20 -> cut -4 -> 16, clamped to [20, 20]: I stays 20.
    assert track(PIDState(integral=20.0), -4.0, applied=20.0).integral == pytest.approx(20.0)


def test_scale_down_held_by_cooldown_does_not_ratchet_up() -> None:
    # Fleet at 100. Measurement 0.5 with setpoint 1: e = -0.5, P = kp * e = 10 * -0.5 = -5 -> intended 95.
    c = cfg(kp=10.0)
    out, s, _ = pid_step(c, PIDState(), 0.5, 15, current=100, out_min=0, out_max=1000)
    assert out == pytest.approx(95.0)
    # The cool-down holds the fleet at 100: cut = 100 - 95 = +5. Adding all of it would leave
    # I = 105 = applied - P, above the fleet; it is clamped to the applied 100.
    s = track(s, 100.0 - out, applied=100.0)
    assert s.integral == pytest.approx(100.0)
    # Back inside the setpoint (e = 0, P = 0): the output is the fleet as it is, not a scale-up to 105.
    out, s, _ = pid_step(c, s, 1.0, 15, current=100, out_min=0, out_max=1000)
    assert out == pytest.approx(100.0)


def test_track_feeds_into_next_step() -> None:
    c = cfg(ki=0.1)
    _, s, _ = pid_step(c, PIDState(), 2.0, 10, current=10, out_min=0, out_max=100)  # I = 11
    s = track(s, -3.0, applied=8.0)  # guard let through 3 less: I = 8
    out, s, _ = pid_step(c, s, 2.0, 10, current=10, out_min=0, out_max=100)  # I = 8 + 1 = 9
    assert out == pytest.approx(9.0)


def test_controller_guard_cut_uses_capacity_difference() -> None:
    ctl = PIDController(PIDConfig(), 15.0, 300.0)
    ctl.states["svc"] = PIDState(integral=20.0)
    # intended 5*2 + 2*3 = 16, applied 3*2 + 2*3 = 12 -> cut -4 -> integral 16
    ctl.on_guard_cut("svc", {"a": 5, "b": 2}, {"a": 3, "b": 2}, {"a": 2.0, "b": 3.0})
    assert ctl.states["svc"].integral == pytest.approx(16.0)
    ctl.on_guard_cut("other", {"a": 1}, {"a": 0}, {"a": 1.0})  # unknown service: ignored
    assert "other" not in ctl.states


# ----------------------------------------------------------------------------------- (i) errors
@pytest.mark.parametrize("dt", [0.0, -1.0])
def test_dt_must_be_positive(dt: float) -> None:
    with pytest.raises(ValueError, match="dt"):
        pid_step(cfg(), PIDState(), 1.0, dt, current=1, out_min=0, out_max=10)


def test_out_min_above_out_max_rejected() -> None:
    with pytest.raises(ValueError, match="out_min"):
        pid_step(cfg(), PIDState(), 1.0, 1.0, current=1, out_min=5, out_max=4)


# ----------------------------------------------------------------------------------- (j) scale
def test_gains_scale_with_scale_argument_not_current() -> None:
    c = cfg(kp=0.5, ki=0.1, scale_with_replicas=True)
    # s = scale = 8 (ready capacity), current = 20 (ready + starting) initialises I.
    # e = 1: P = 0.5*8*1 = 4; I = 20 + 0.1*8*1*10 = 28; output = 32 (with s = current it would be 20+10+20=50).
    out, state, terms = pid_step(c, PIDState(), 2.0, 10, current=20, out_min=0, out_max=100, scale=8)
    assert terms.p == pytest.approx(4.0)
    assert state.integral == pytest.approx(28.0)
    assert out == pytest.approx(32.0)


def test_scale_zero_gives_no_action() -> None:
    # No ready capacity: s is floored at 1e-9, so the step barely moves the output.
    c = cfg(kp=0.5, ki=0.1, scale_with_replicas=True)
    out, _, _ = pid_step(c, PIDState(), 3.0, 10, current=6, out_min=0, out_max=100, scale=0.0)
    assert math.isclose(out, 6.0, abs_tol=1e-6)


def test_scale_ignored_when_scale_with_replicas_off() -> None:
    c = cfg(kp=0.5)
    out, _, terms = pid_step(c, PIDState(), 2.0, 10, current=20, out_min=0, out_max=100, scale=8)
    assert terms.p == pytest.approx(0.5)
    assert out == pytest.approx(20.5)


def _estimate(signals: dict[str, float], ready: int, starting: int, w: float, t: float = 100.0):
    from autoscaler.state import ServiceEstimate, Signals, VariantObservation

    return ServiceEstimate(
        service="svc", time_s=t, signals=Signals.of(signals),
        variants={"h100": VariantObservation(ready=ready, starting=starting)}, weights={"h100": w},
        idle=False, capacity_rps=(ready + starting) * w, ready_capacity_rps=ready * w, starting=starting,
    )


def test_controller_holds_while_starting_replicas_cover_the_target(make_fleet) -> None:
    # One variant of capacity w per replica; 2 ready + 2 starting; measurement 1.0 vs setpoint 0.5 -> e = 1.
    from autoscaler.config import ControllerConfig, PIDConfig

    cfg = make_fleet(4, min_replicas=0, max_replicas=10)
    svc = cfg.services[0]
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_p95_ratio", kp=0.0, ki=0.01, setpoint=0.5, deadband=0.0))
    est = _estimate({"slo_p95_ratio": 1.0}, ready=2, starting=2, w=10.0)
    # kp = 0: the output is the integral, frozen at 4w while replicas start -> 4 replicas: hold.
    d = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s).decide(est, svc)
    assert d.desired == {"h100": 4}
    assert d.reason.startswith("no change: slo_p95_ratio=1 vs setpoint 0.5") and not d.hold
    assert "waiting for 2 starting replica(s)" in d.reason


def test_controller_never_scales_against_the_error(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=20).services[0]
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, kp=0.0, ki=0.0,
                                          deadband=0.0))
    ctl = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    # A wound-up integral of 12 replicas (w = 10) while the fleet has 10: the output asks for 12,
    # but the measurement (0.2 < 0.3) says over-provisioned: hold, never scale up.
    ctl.states["svc"] = PIDState(integral=120.0)
    d = ctl.decide(_estimate({"slo_mean_ratio": 0.2}, 10, 0, 10.0), svc)
    assert d.desired == {"h100": 10}
    assert "disagrees with the error's sign" in d.reason
    # The mirror case: integral at 8 replicas, measurement above the setpoint: no scale-down.
    ctl.states["svc"] = PIDState(integral=80.0)
    d = ctl.decide(_estimate({"slo_mean_ratio": 0.4}, 10, 0, 10.0), svc)
    assert d.desired == {"h100": 10}


def test_controller_reanchors_the_integral_inside_the_deadband(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=20).services[0]
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, deadband=0.25))
    ctl = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    ctl.states["svc"] = PIDState(integral=95.0)
    # 0.25 / 0.3 - 1 = -0.167, inside +-0.25: hold, and the integral becomes the fleet (9 x 10 = 90),
    # so a later step starts from the replicas that run, not from an old target.
    d = ctl.decide(_estimate({"slo_mean_ratio": 0.25}, 9, 0, 10.0), svc)
    assert d.desired == {"h100": 9}
    assert ctl.states["svc"].integral == pytest.approx(90.0)


def test_overload_sizes_for_arrivals_from_queue_growth(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    # kp = ki = 0: only the overload rule can add capacity.
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, kp=0.0, ki=0.0,
                                          deadband=0.0, error_clip=3.0))
    ctl = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    sig = {"slo_mean_ratio": 2.0, "request_rate_rps": 10.0}  # e = 2/0.3 - 1 = 5.7, clipped to 3: saturated
    ctl.decide(_estimate({**sig, "queue_length": 0.0}, 2, 0, 10.0, t=100.0), svc)
    # 60 s later the queue holds 150 more: arrivals ~ 10 served + 150/60 = 12.5 req/s, so the 2 ready
    # replicas (20 req/s of capacity) should be 20 x 12.5 / 10 = 25 -> 3 replicas.
    d = ctl.decide(_estimate({**sig, "queue_length": 150.0}, 2, 0, 10.0, t=160.0), svc)
    assert d.desired == {"h100": 3}
    # Not saturated (e = 0.5 / 0.3 - 1 = 0.67 < 3): the rule does not apply.
    ctl2 = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    low = {"slo_mean_ratio": 0.5, "request_rate_rps": 10.0}
    ctl2.decide(_estimate({**low, "queue_length": 0.0}, 2, 0, 10.0, t=100.0), svc)
    d = ctl2.decide(_estimate({**low, "queue_length": 150.0}, 2, 0, 10.0, t=160.0), svc)
    assert d.desired == {"h100": 2}


def test_overload_factor_is_capped_at_one_plus_error_clip(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, kp=0.0, ki=0.0,
                                          deadband=0.0, error_clip=3.0))
    ctl = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    sig = {"slo_mean_ratio": 2.0, "request_rate_rps": 1e-9}  # completions stalled, queue growing
    ctl.decide(_estimate({**sig, "queue_length": 0.0}, 2, 0, 10.0, t=100.0), svc)
    d = ctl.decide(_estimate({**sig, "queue_length": 600.0}, 2, 0, 10.0, t=160.0), svc)
    # Uncapped: 20 x (1e-9 + 10) / 1e-9 -> the whole fleet. Capped at 1 + 3 = 4x: 80 req/s -> 8 replicas.
    assert d.desired == {"h100": 8}


def test_shedding_sizes_for_the_gateways_arrivals_while_the_error_is_positive(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    # kp = ki = 0: only the demand floor can add capacity. e = 0.4 / 0.3 - 1 = 0.33 > 0, far below the clip.
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, kp=0.0, ki=0.0,
                                          deadband=0.0, error_clip=3.0))
    sig = {"slo_mean_ratio": 0.4, "request_rate_rps": 10.0, "arrival_rate_rps": 25.0, "queue_length": 0.0}
    shedding = {**sig, "gateway_shed_rps.sheddable": 9.0, "gateway_shed_rps.standard": 0.0}
    # 2 ready replicas of 10 req/s; the gateway receives 25 req/s and 10 complete: 20 x 25 / 10 = 50 -> 5.
    d = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s).decide(_estimate(shedding, 2, 0, 10.0), svc)
    assert d.desired == {"h100": 5}
    # Capped at 1 + error_clip = 4x the ready capacity: 80 req/s -> 8 replicas.
    d = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s).decide(
        _estimate({**shedding, "arrival_rate_rps": 1000.0}, 2, 0, 10.0), svc)
    assert d.desired == {"h100": 8}
    # Nothing shed (0, or no gateway data): the same arrivals do not move it, as before.
    for quiet in ({**sig, "gateway_shed_rps.sheddable": 0.0}, sig):
        d = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s).decide(_estimate(quiet, 2, 0, 10.0), svc)
        assert d.desired == {"h100": 2}
    # Shedding with the latency below the setpoint (e < 0): no scale-up from it.
    d = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s).decide(
        _estimate({**shedding, "slo_mean_ratio": 0.2}, 2, 0, 10.0), svc)
    assert d.desired == {"h100": 2}


def test_shedding_sizes_from_the_replicas_that_served_the_window_not_those_just_ready(make_fleet) -> None:
    from autoscaler.config import ControllerConfig, PIDConfig

    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, kp=0.0, ki=0.0,
                                          deadband=0.0, error_clip=3.0), window_s=300.0)
    ctl = PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)
    shedding = {"slo_mean_ratio": 0.4, "request_rate_rps": 10.0, "arrival_rate_rps": 25.0, "queue_length": 0.0,
                "gateway_shed_rps.sheddable": 9.0}
    # Ticks at 15 s: 2 ready replicas (10 req/s each) from 0 to 240 s, then 2 more become ready at
    # 255 s. The window's 10 req/s of completions came from 2 replicas for 17 of its 19 samples
    # (255 and 270 s hold 4): mean capacity (17 x 20 + 2 x 40) / 19 = 22.1; x 25 / 10 = 55.3 -> 6
    # replicas. Times the 40 ready now it was 100 -> 10.
    for t in range(0, 255, 15):
        ctl.decide(_estimate(shedding, 2, 0, 10.0, t=float(t)), svc)
    ctl.decide(_estimate(shedding, 4, 0, 10.0, t=255.0), svc)
    d = ctl.decide(_estimate(shedding, 4, 0, 10.0, t=270.0), svc)
    assert d.desired == {"h100": 6}
    assert d.terms["target_capacity_rps"] == pytest.approx((17 * 20 + 2 * 40) / 19 * 2.5)


def _pid(**kw: float) -> PIDController:
    from autoscaler.config import ControllerConfig, PIDConfig

    ctrl = ControllerConfig(pid=PIDConfig(setpoint_signal="slo_mean_ratio", setpoint=0.3, deadband=0.0, **kw))
    return PIDController(ctrl.pid, ctrl.tick_s, ctrl.window_s)


def test_no_scale_up_when_nothing_is_running_or_waiting(make_fleet) -> None:
    svc = make_fleet(2, min_replicas=0, max_replicas=20).services[0]
    # the window's latency is 3x the setpoint, but the traffic has stopped: nothing in flight
    quiet = {"slo_mean_ratio": 0.9, "request_rate_rps": 5.0, "arrival_rate_rps": 5.0, "queue_length": 0.0,
             "running": 0.0}
    assert _pid().decide(_estimate(quiet, 2, 0, 10.0), svc).desired == {"h100": 2}
    busy = {**quiet, "running": 12.0, "arrival_rate_rps": 30.0}  # in flight, and more arriving than it serves
    assert _pid().decide(_estimate(busy, 2, 0, 10.0), svc).desired["h100"] > 2


def test_while_replicas_start_a_scale_up_asks_for_at_most_one_and_a_half_times_the_demand(make_fleet) -> None:
    svc = make_fleet(4, min_replicas=0, max_replicas=40).services[0]
    # 2 ready + 2 starting of 10 req/s, 30 req/s arriving, the error at its clip: without the cap the
    # P term alone asks for far more; with it, at most 1.5 x 30 = 45 req/s -> 5 replicas
    sig = {"slo_mean_ratio": 3.0, "request_rate_rps": 20.0, "arrival_rate_rps": 30.0, "queue_length": 50.0,
           "running": 100.0}
    d = _pid(kp=2.0).decide(_estimate(sig, 2, 2, 10.0), svc)
    assert d.desired == {"h100": 5}, d.terms


def test_no_scale_down_on_arrivals_unknown_or_inferred_beside_a_silent_pod(make_fleet) -> None:
    from dataclasses import replace

    from autoscaler.state import PodObservation

    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    # the case below (10 x 10 req/s, 32 arriving, latency far below the setpoint: floor 40 -> 4 replicas),
    # with 9 of the 10 ready pods reporting: a counted (gateway) rate still floors at 4 replicas, but one
    # inferred without a gateway counter misses the silent pod's requests and may read low, and an
    # unknown one says nothing: the floor is unknown, so nothing goes (10; before, 4 and the P term's 0)
    sig = {"slo_mean_ratio": 0.03, "request_rate_rps": 32.0, "arrival_rate_rps": 32.0, "queue_length": 0.0,
           "running": 20.0}
    pods = [PodObservation("h100", 0.1, 0.0, 2.0, 0.1, 0.0, name=f"p{i}") for i in range(9)]
    silent = replace(_estimate(sig, 10, 0, 10.0), pods=pods)
    assert _pid(kp=5.0, down_gain=1.0).decide(silent, svc).desired == {"h100": 4}
    d = _pid(kp=5.0, down_gain=1.0).decide(replace(silent, arrivals_inferred=True), svc)
    assert d.desired == {"h100": 10} and "arrivals unknown or reading low" in d.reason, d.reason
    unknown = _estimate({k: v for k, v in sig.items() if k != "arrival_rate_rps"}, 10, 0, 10.0)
    d = _pid(kp=5.0, down_gain=1.0).decide(unknown, svc)
    assert d.desired == {"h100": 10} and "arrivals unknown or reading low" in d.reason, d.reason
    # inferred with every pod reporting: the sums hold every request, the floor reads it (4)
    every = replace(silent, pods=[*pods, replace(pods[0], name="p9")], arrivals_inferred=True)
    assert _pid(kp=5.0, down_gain=1.0).decide(every, svc).desired == {"h100": 4}


def test_a_scale_down_leaves_a_quarter_more_than_the_arrivals(make_fleet) -> None:
    svc = make_fleet(10, min_replicas=0, max_replicas=40).services[0]
    # 10 replicas of 10 req/s, 32 req/s arriving, latency far below the setpoint: the floor is
    # 1.25 x 32 = 40 req/s -> 4 replicas, however hard the P term pulls
    sig = {"slo_mean_ratio": 0.03, "request_rate_rps": 32.0, "arrival_rate_rps": 32.0, "queue_length": 0.0,
           "running": 20.0}
    d = _pid(kp=5.0, down_gain=1.0).decide(_estimate(sig, 10, 0, 10.0), svc)
    assert d.desired == {"h100": 4}, d.terms


def test_a_queue_growing_by_noise_is_not_growing() -> None:
    # over the lookback: 0 -> 1 waiting with 7 running is noise (1 <= 1 + 0.7); 0 -> 5 with 20 running is not
    assert not queue_growing(((0.0, 0.0), (60.0, 1.0)), 7.0)
    assert queue_growing(((0.0, 0.0), (60.0, 5.0)), 20.0)
    assert not queue_growing(((0.0, 0.0), (60.0, 1 + QUEUE_NOISE * 20.0)), 20.0)
    assert queue_growing(((0.0, 0.0), (60.0, 2.5)), None)
    assert not queue_growing(((0.0, 5.0),), 0.0)
