"""The embedded default workload: a synthetic hour shaped like real LLM-serving traffic, no data files.

Model (every constant below is measured; re-derive them with
``python -m autoscaler.workload.measure --data ../shared/data``, a test checks they agree):

* Rate curve, requests/s: ``rate(t) ∝ exp(-A cos(2π t / day_s) + X(t))``, scaled so its mean over the
  duration is ``mean_rate_rps``. One simulated "day" of ``day_s`` seconds (default: the whole duration,
  i.e. a day compressed into the hour, so the curve swings as much as a real day does) starts at the
  trough. ``A`` is the 24 h harmonic of the ServeGen m-large aggregate log-rate (weak: Alibaba's
  aggregate is driven more by multi-hour client swings than by time of day); ``X`` is an
  Ornstein-Uhlenbeck process with the stationary std and the 600 s lag-1 autocorrelation of the
  remaining log-rate, its correlation time (107 min) compressed by the same day factor (to 268 s for
  a one-hour day). With the defaults (5.53 req/s, seeds 0-2) the 60 s rate ranges over ~1.6-2.8 req/s
  at the troughs and ~11-12 req/s at the peaks (5 min means: 2.9-10.7), i.e. ~1-3 up to ~4-12
  Llama-3.1-8B replicas at 1-3 req/s each.
* Arrivals: a Gamma renewal process with the inter-arrival CV of Azure conv, time-changed by the rate
  curve (unit-rate Gamma gaps in cumulative-rate time, mapped back through the inverse cumulative rate).
* Lengths, tokens: lognormal, fitted to the Azure conv median and mean (mu = ln median,
  sigma = sqrt(2 ln(mean / median))), clipped to [1, Azure max]. Input and output are drawn
  independently (their log correlation in Azure conv is 0.09). Within a conversation, the turns' input
  lengths are drawn together and sorted, so each turn is at least as long as the last (the marginal
  distribution is unchanged).
* Prefix sharing, 512-token blocks: each request belongs to one of ``N_APPS`` applications (Zipf
  weights, exponent from the ServeGen m-large client mix) whose system prompt fills the first
  ``SYSTEM_PROMPT_BLOCKS`` complete blocks (Mooncake: every request shares exactly one leading block).
  A request is the next turn of a waiting conversation when one is due, else a new conversation; a
  later turn repeats every complete block of the previous turn and adds new ones (the continuation
  rule of ``classes.group_workflows``). Turns per conversation: 1 with probability
  ``SINGLE_TURN_FRACTION``, else 2 + a geometric number with mean ``MULTI_TURN_MEAN_TURNS`` - 2; the
  gap before the next turn is lognormal from the Mooncake median/mean gap between steps. Each
  conversation is one workflow (``step`` = turn index).
* Classes: ``classes.assign_classes`` per conversation (default 20 % batch, an assumption).

Resulting default (seeds 0-2, 3600 s): ~19,800-19,900 requests; input mean ~1,140 tokens (median
~1,000), output mean ~200 (median 128; 5 % below Azure's 211 because of the 1,000-token clip);
block-level reuse with an infinite cache ~38 % (Mooncake conversation trace: 36.6 %); ~29 % of
requests are follow-up turns (Mooncake: 33 %; conversations still open at the end are cut).
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass

import numpy as np

from autoscaler.workload.classes import assign_classes
from autoscaler.workload.types import Request, Workload

# --- Measured constants (printed by autoscaler.workload.measure) -------------------------------------
# Azure LLM inference trace 2023, AzureLLMInferenceTrace_conv.csv (AzurePublicDataset, file commit
# 790921015d50dd6aae7f7e47f39ba0e235ad6b08), 19,366 requests over 3,502 s.
AZURE_CONV_RATE_RPS = 5.530  # requests/s
INTERARRIVAL_CV = 1.094  # std/mean of inter-arrival times
INPUT_MEDIAN_TOKENS = 1020
INPUT_MEAN_TOKENS = 1154.7
INPUT_MAX_TOKENS = 14050
OUTPUT_MEDIAN_TOKENS = 129
OUTPUT_MEAN_TOKENS = 211.1
OUTPUT_MAX_TOKENS = 1000
# ServeGen language/m-large (alibaba/ServeGen f891d1189eb32b3868dfc443800c4150548c282a): 14 days of
# 600 s windows, DERIVED_aggregate_rate_per_window.csv (sum over clients) and chunk-*-trace.csv.
DIURNAL_LOG_AMPLITUDE = 0.1380  # amplitude of the 24 h harmonic of log(rate / mean rate)
RATE_LOG_STD = 0.3950  # std of the remaining log-rate
RATE_LAG1_CORR = 0.9110  # its autocorrelation at a 600 s lag
N_APPS = 20  # clients with >= 1 % of the total mean rate
APP_ZIPF_EXPONENT = 0.9446  # -slope of log(client mean rate) vs log(rank) over those 20
# Mooncake conversation_trace.jsonl (kvcache-ai/Mooncake, file commit
# 3cca71daccf2a7afb8fe3f0295358f70e3a69fdb), 12,031 requests, workflows by classes.group_workflows.
SYSTEM_PROMPT_BLOCKS = 1  # leading 512-token blocks shared by every request
SINGLE_TURN_FRACTION = 0.7502  # of 8,056 workflows
MULTI_TURN_MEAN_TURNS = 2.976  # mean steps of the 2,012 multi-step workflows
TURN_GAP_MEDIAN_S = 123.0  # seconds between consecutive steps
TURN_GAP_MEAN_S = 212.3

CONSTANTS: dict[str, float] = {
    "AZURE_CONV_RATE_RPS": AZURE_CONV_RATE_RPS,
    "INTERARRIVAL_CV": INTERARRIVAL_CV,
    "INPUT_MEDIAN_TOKENS": INPUT_MEDIAN_TOKENS,
    "INPUT_MEAN_TOKENS": INPUT_MEAN_TOKENS,
    "INPUT_MAX_TOKENS": INPUT_MAX_TOKENS,
    "OUTPUT_MEDIAN_TOKENS": OUTPUT_MEDIAN_TOKENS,
    "OUTPUT_MEAN_TOKENS": OUTPUT_MEAN_TOKENS,
    "OUTPUT_MAX_TOKENS": OUTPUT_MAX_TOKENS,
    "DIURNAL_LOG_AMPLITUDE": DIURNAL_LOG_AMPLITUDE,
    "RATE_LOG_STD": RATE_LOG_STD,
    "RATE_LAG1_CORR": RATE_LAG1_CORR,
    "N_APPS": N_APPS,
    "APP_ZIPF_EXPONENT": APP_ZIPF_EXPONENT,
    "SYSTEM_PROMPT_BLOCKS": SYSTEM_PROMPT_BLOCKS,
    "SINGLE_TURN_FRACTION": SINGLE_TURN_FRACTION,
    "MULTI_TURN_MEAN_TURNS": MULTI_TURN_MEAN_TURNS,
    "TURN_GAP_MEDIAN_S": TURN_GAP_MEDIAN_S,
    "TURN_GAP_MEAN_S": TURN_GAP_MEAN_S,
}
"""Every measured constant above, by the name ``measure.py`` prints it under (for the test)."""

# --- Fixed choices (not measurements) ----------------------------------------------------------------
BLOCK_TOKENS = 512  # Mooncake block size
SERVEGEN_WINDOW_S = 600.0  # spacing of the windows RATE_LAG1_CORR is measured on
DAY_S = 86400.0
GRID_S = 1.0  # resolution of the rate curve, seconds


def lognormal_params(median: float, mean: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this median and mean."""
    return math.log(median), math.sqrt(2.0 * math.log(mean / median))


def rate_curve(
    duration_s: float,
    mean_rate_rps: float,
    rng: np.random.Generator,
    day_s: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample the rate curve of the module model.

    Args:
        duration_s: length of the curve, seconds.
        mean_rate_rps: mean of the returned rate over [0, duration_s], requests/s.
        rng: random generator (advanced).
        day_s: seconds that stand for one real day (None = ``duration_s``).

    Returns:
        (times in seconds on a <= 1 s grid from 0 to duration_s, rate in requests/s at those times).
    """
    day = duration_s if day_s is None else day_s
    n = max(math.ceil(duration_s / GRID_S), 1)
    t = np.linspace(0.0, duration_s, n + 1)
    corr_time_s = -SERVEGEN_WINDOW_S / math.log(RATE_LAG1_CORR) * day / DAY_S
    a = math.exp(-(duration_s / n) / corr_time_s)
    noise = rng.normal(0.0, RATE_LOG_STD * math.sqrt(1.0 - a * a), n)
    x = np.empty(n + 1)
    x[0] = rng.normal(0.0, RATE_LOG_STD)  # start in the stationary distribution
    for i in range(n):
        x[i + 1] = a * x[i] + noise[i]
    rate = np.exp(-DIURNAL_LOG_AMPLITUDE * np.cos(2 * np.pi * t / day) + x)
    mean = np.sum((rate[1:] + rate[:-1]) / 2) / n
    return t, rate * (mean_rate_rps / mean)


@dataclass(slots=True)
class _Conversation:
    """State of one synthetic conversation (= workflow)."""

    app: int
    inputs: list[int]  # input tokens of each planned turn, ascending
    turn: int = 0  # next turn index
    hash_ids: tuple[int, ...] = ()  # of the previous turn
    complete: int = 0  # complete blocks of the previous turn


def synthetic_workload(
    duration_s: float = 3600.0,
    seed: int = 0,
    mean_rate_rps: float = AZURE_CONV_RATE_RPS,
    day_s: float | None = None,
    batch_fraction: float = 0.2,
) -> Workload:
    """Generate the embedded default workload (see the module docstring for the model).

    Args:
        duration_s: arrivals fall in [0, duration_s), seconds.
        seed: the same arguments and seed always give the same workload.
        mean_rate_rps: mean arrival rate, requests/s (default: Azure conv's 5.53).
        day_s: seconds of workload that stand for one real day of rate variation (None = duration_s).
        batch_fraction: fraction of conversations marked batch.

    Returns:
        a ``Workload`` with ``block_tokens`` = 512 and ``source`` = ``"synthetic:default"``.

    Raises:
        ValueError: a non-finite or non-positive duration, rate or day length, or a bad batch fraction.
    """
    for name, value in (("duration_s", duration_s), ("mean_rate_rps", mean_rate_rps), ("day_s", day_s)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    rng = np.random.default_rng(seed)
    t, rate = rate_curve(duration_s, mean_rate_rps, rng, day_s)

    # Gamma renewal process with mean gap 1 in cumulative-rate time, mapped back to seconds.
    cumulative = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(t))])
    shape_k = 1.0 / INTERARRIVAL_CV**2
    expected = cumulative[-1]
    points = np.cumsum(rng.gamma(shape_k, 1.0 / shape_k, int(expected + 10 * math.sqrt(expected) + 100)))
    while points[-1] < expected:
        points = np.concatenate([points, points[-1] + np.cumsum(rng.gamma(shape_k, 1.0 / shape_k, 1000))])
    arrivals = np.interp(points[points < expected], cumulative, t)

    in_mu, in_sigma = lognormal_params(INPUT_MEDIAN_TOKENS, INPUT_MEAN_TOKENS)
    out_mu, out_sigma = lognormal_params(OUTPUT_MEDIAN_TOKENS, OUTPUT_MEAN_TOKENS)
    gap_mu, gap_sigma = lognormal_params(TURN_GAP_MEDIAN_S, TURN_GAP_MEAN_S)
    outputs = np.clip(np.rint(rng.lognormal(out_mu, out_sigma, len(arrivals))), 1, OUTPUT_MAX_TOKENS)
    app_cdf = np.cumsum(np.arange(1, N_APPS + 1, dtype=float) ** -APP_ZIPF_EXPONENT)
    app_cdf = (app_cdf / app_cdf[-1]).tolist()
    extra_turn_p = 1.0 / (MULTI_TURN_MEAN_TURNS - 1.0)  # geometric on {1, 2, ...}, mean MULTI - 1

    conversations: list[_Conversation] = []
    due: list[tuple[float, int]] = []  # (time the next turn may arrive, conversation id)
    next_hash = N_APPS * SYSTEM_PROMPT_BLOCKS  # ids below are the applications' system prompts
    requests: list[Request] = []
    for arrival, output in zip(arrivals.tolist(), outputs.tolist(), strict=True):  # floats, not numpy scalars
        if due and due[0][0] <= arrival:
            wf = heapq.heappop(due)[1]
        else:
            wf = len(conversations)
            turns = 1 if rng.random() < SINGLE_TURN_FRACTION else 1 + int(rng.geometric(extra_turn_p))
            # round() rounds half to even as np.rint does; plain Python is ~5x faster on a few numbers.
            lengths = [min(max(round(x), 1), INPUT_MAX_TOKENS) for x in rng.lognormal(in_mu, in_sigma, turns).tolist()]
            app = bisect.bisect_right(app_cdf, rng.random())
            conversations.append(_Conversation(app, sorted(lengths)))
        conv = conversations[wf]
        tokens = conv.inputs[conv.turn]
        complete, blocks = tokens // BLOCK_TOKENS, -(-tokens // BLOCK_TOKENS)
        system = min(SYSTEM_PROMPT_BLOCKS, complete)
        hash_ids = []
        for pos in range(blocks):
            if pos < system:
                hash_ids.append(conv.app * SYSTEM_PROMPT_BLOCKS + pos)
            elif pos < conv.complete:  # a complete block of the previous turn: same content, same id
                hash_ids.append(conv.hash_ids[pos])
            else:
                hash_ids.append(next_hash)
                next_hash += 1
        requests.append(
            Request(
                arrival_s=float(arrival),
                input_tokens=tokens,
                output_tokens=int(output),
                hash_ids=tuple(hash_ids),
                workflow_id=wf,
                step=conv.turn,
            )
        )
        conv.turn += 1
        conv.hash_ids, conv.complete = tuple(hash_ids), complete
        if conv.turn < len(conv.inputs):
            heapq.heappush(due, (float(arrival) + rng.lognormal(gap_mu, gap_sigma), wf))

    meta: dict[str, float | str] = {"seed": seed, "duration_s": duration_s, "mean_rate_rps": mean_rate_rps}
    workload = Workload(requests, block_tokens=BLOCK_TOKENS, source="synthetic:default", meta=meta)
    return assign_classes(workload, batch_fraction=batch_fraction, seed=seed)
