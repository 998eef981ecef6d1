"""A prompt's prefill on an idle replica, by brute force: the shared helper of the busy-period form's
first-token tests (``tests/unit/test_busy_first_token.py``, ``tests/unit/test_busy_shared.py``)."""

from __future__ import annotations

from models.profiles import PerformanceProfile, prefill_pairs


def idle_prefill_s(profile: PerformanceProfile, prompt: int, budget: int = 8192) -> float:
    """Seconds from arrival to first token of a ``prompt``-token request alone on an idle replica: the
    prompt prefills in chunks of at most ``budget`` tokens, each step the profile's step time for its chunk
    and the attention pairs it forms at its position; the first token comes at the end of the last (the
    simulator's order: an idle replica starts the step at once)."""
    t, done = 0.0, 0
    while done < prompt:
        c = min(budget, prompt - done)
        t += profile.step_time(c, 0, 0, prefill_pairs(done, c))
        done += c
    return t
