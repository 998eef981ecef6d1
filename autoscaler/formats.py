"""How the human-readable output writes money, shares and counts (``simulate``, ``compare``, ``faults run``).

One helper per kind, so every table writes a figure the same way: ``$14.94`` (a total),
``$0.0000417`` (a cost per request or task), ``99.12%`` (a share, no space before the sign). A
missing figure (None) is ``-``. JSON and YAML outputs keep the numbers; only tables use these.
"""

from __future__ import annotations

TOTAL_PLACES = 2
"""Decimal places of a total in dollars (cents)."""

PER_REQUEST_PLACES = 7
"""Decimal places of a cost per request or per task: a request costs ~$1e-5 on the shipped
profiles' prices, so 7 places keep 3 significant digits."""

PERCENT_PLACES = 2
"""Decimal places of a share in percent (99.99% and 100.00% differ)."""


def money(usd: float | None, places: int = TOTAL_PLACES) -> str:
    """``usd`` dollars as ``$1.23`` (``places`` decimals; ``-$1.23`` when negative); ``-`` for None."""
    if usd is None:
        return "-"
    # the sign before the "$"; a value that rounds to zero is $0.00, never -$0.00
    return f"-${-usd:.{places}f}" if round(usd, places) < 0 else f"${abs(usd):.{places}f}"


def per_request(usd: float | None) -> str:
    """A cost per request or task: ``money`` to ``PER_REQUEST_PLACES`` places (``$0.0000417``)."""
    return money(usd, PER_REQUEST_PLACES)


def percent(share: float | None, places: int = PERCENT_PLACES) -> str:
    """``share`` (a fraction, 0.9912) as ``99.12%``; ``-`` for None."""
    return "-" if share is None else f"{share:.{places}%}"


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: ``1 row``, ``3 rows`` (the nouns here take an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
