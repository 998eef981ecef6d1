"""A starved fleet's workload (issue 28): many prompts prefilled, few requests finished."""

from __future__ import annotations

from autoscaler.workload.types import Request, Workload

PROMPT = 1000
"""Every request's prompt, tokens."""
LONGEST = 4096
"""The fleet's ``max_model_len`` (the longest request, 1000 in + 3000 out, fits)."""


def starved() -> Workload:
    """80 requests of 1000 in / 3000 out in the first 8 s (all admitted on one replica of the test fleet:
    80 x 4000 tokens fit its 400k KV cache, and none finishes within a minute) and one of 1000 in / 2 out
    every 5 s from 1 s on: every request, finished or not, has a 1000-token prompt."""
    reqs = [Request(arrival_s=0.1 * i, input_tokens=PROMPT, output_tokens=3000) for i in range(80)]
    reqs += [Request(arrival_s=1.0 + 5.0 * i, input_tokens=PROMPT, output_tokens=2) for i in range(30)]
    return Workload(sorted(reqs, key=lambda r: r.arrival_s))
