"""How bursty a service's arrivals are within a minute: the index of dispersion of 2-s counts.

The capacity model's queues (``models.capacity``: the TTFT bound's prefill queue, the ITL bound's
prefills arriving during a decode) and the learner's latency curve (``models.learning``) read the
arrivals' variability as ``RequestMix.arrival_scv`` (1 for Poisson). Kingman's heavy-traffic wait,
``rho E[S] (ca^2 + cs^2) / (2 (1 - rho))``, takes ``ca^2`` from a renewal process; for arrivals that
are not renewal, Whitt's asymptotic method (W. Whitt, "The Queueing Network Analyzer", Bell System
Technical Journal 62(9), 1983, section 4) uses in its place the index of dispersion of counts
``I(t) = Var N(t) / E N(t)`` at the time scale the queue works on (``I(t) -> ca^2`` as ``t -> inf``
for a renewal process; exactly 1 for Poisson at every ``t``). Here the time scale is ``BIN_S``, the
interactive TTFT target's order: a burst matters to the prefill queue when its requests land within
the time one may wait, and a decode's window (``D x itl_s``) is seconds long too. The counts are
taken about the minute's mean, so the minute-to-minute swing of the rate (the forecast's and the
hold's to cover) is not counted as burstiness.

What a deployment reads it from: the gateway sees every request's arrival. Three counters, each
advanced when a ``BIN_S`` bin closes, give the index over any window from ``rate()`` alone, at any
scrape interval: the bins closed (``K``), the arrivals in them (``N``) and the sum of each bin's count
squared (``Q``). Over a window, ``rate(N) / rate(K)`` is the mean count of a bin and ``rate(Q) /
rate(K)`` its mean square, so ``I = (rate(Q) / rate(K) - m^2) / m`` with ``m = rate(N) / rate(K)``
(``dispersion_from_rates``): ratios of rates over the same samples, so Prometheus's extrapolation to
the window's edges cancels (as in ``rate(_sum) / rate(_count)``), and all three cover the same bins
(the index is a difference of two near-equal moments: a count and a square over different spans
would bias it by about the bin's mean count). The simulator's gateway keeps both (``autoscaler.simulator.fleet``,
``SimMetricsSource``); the Prometheus source does not query a squares counter (no gateway exports
one today), so there the index is unknown and the model stays Poisson.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BIN_S = 2.0
"""Width of the bins whose counts the index is of, seconds: the interactive TTFT target of the shipped
fleets (2 s), the time within which a burst's requests queue for one another's prefills. Measured
on the shipped traces (median over 60-s windows; 1-s / 2-s / 5-s bins): Azure code x20 56 / 112 /
258, Azure conv x20 2.6 / 4.1 / 7.8, Mooncake x6 2.3 / 2.2 / 3.3 (the index grows with the bin
where the load swings within the minute)."""

MIN_COUNT = 20.0
"""Fewest arrivals over the window an index is computed from: below, the sample variance of a
Poisson window's 1-s counts is off by more than ~30 % (its relative standard error is about
``sqrt(2 / (bins - 1))`` plus the count's own ``1 / sqrt(N)``), so the index is unknown."""


def dispersion_from_rates(bin_rate: float, count_rate: float, square_rate: float, window_s: float
                          ) -> float | None:
    """The index of dispersion of binned arrival counts over a window, from three counter rates.

    Args:
        bin_rate: ``rate()`` of the bins-closed counter over the window, bins/s.
        count_rate: ``rate()`` of the arrivals-in-closed-bins counter over the window, requests/s.
        square_rate: ``rate()`` of the squares counter over the window (the sum over closed bins of
            each one's count squared), requests^2/s.
        window_s: the window, seconds (> 0): fewer than ``MIN_COUNT`` arrivals in it give None.

    Returns:
        ``(E[n^2] - m^2) / m`` with ``m = count_rate / bin_rate`` and ``E[n^2] = square_rate /
        bin_rate`` (dimensionless; 1 for Poisson, above for bursty arrivals, below for smoother
        ones), at least 0; None when a rate is unknown or not finite, no bin closed, or the window
        holds too few arrivals to tell.

    Raises:
        ValueError: ``window_s`` not > 0.
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    rates = (bin_rate, count_rate, square_rate)
    if not all(math.isfinite(r) for r in rates) or not bin_rate > 0 or count_rate * window_s < MIN_COUNT:
        return None
    m = count_rate / bin_rate
    return max(0.0, (square_rate / bin_rate - m * m) / m)


def dispersion_of_counts(counts: Sequence[float] | np.ndarray) -> float:
    """Index of dispersion of bin counts about their own mean: population variance over mean.

    Args:
        counts: arrivals per bin (>= 0), at least one bin with an arrival.

    Returns:
        ``Var(counts) / mean(counts)`` (dimensionless).

    Raises:
        ValueError: no bin, a negative count, or every count zero.
    """
    c = np.asarray(counts, dtype=float)
    if c.size == 0 or np.any(c < 0) or not c.sum() > 0:
        raise ValueError("counts must be non-negative with at least one arrival")
    return float(c.var() / c.mean())


def per_replica_scv(index: float, replicas: int) -> float:
    """The arrivals' variability one of ``replicas`` replicas sees, from the service's index.

    A router splitting a stream of index ``I`` over ``n`` replicas gives each about ``1 / n`` of every
    burst: for a random split (each request to a replica with probability ``1 / n``) the index of each
    replica's counts is exactly ``I / n + (1 - 1 / n)`` (a thinned process: ``Var N_i = E N / n^2 (I -
    1) + E N / n``). A least-loaded router splits more evenly than random, so this errs toward
    more burstiness, the side that keeps the SLO.

    Args:
        index: the service's index of dispersion (>= 0).
        replicas: replicas sharing the stream (>= 1).

    Raises:
        ValueError: a negative or non-finite index, or fewer than one replica.
    """
    if not (index >= 0 and math.isfinite(index)) or replicas < 1:
        raise ValueError(f"need a finite index >= 0 and replicas >= 1, got {index} and {replicas}")
    return 1.0 + (index - 1.0) / replicas
