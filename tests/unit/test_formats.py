"""``autoscaler.formats``: money and shares as every human-readable table writes them."""

from __future__ import annotations

from autoscaler.formats import count, money, per_request, percent


def test_money_is_dollars_with_the_sign_before_them() -> None:
    assert money(14.94) == "$14.94" and money(0.7749) == "$0.77" and money(1234.5) == "$1234.50"
    assert money(-2.5) == "-$2.50"
    assert money(-0.001) == "$0.00" and money(-0.0) == "$0.00"  # rounds to zero: no "-$0.00"
    assert money(None) == "-"


def test_a_cost_per_request_keeps_seven_places() -> None:
    # simulate's "cost per successful request" on the embedded default: 4.169e-05 $ -> $0.0000417
    assert per_request(4.169e-05) == "$0.0000417" and per_request(6.02e-05) == "$0.0000602"
    assert per_request(None) == "-"


def test_a_share_is_a_percentage_with_no_space() -> None:
    assert percent(0.9678) == "96.78%" and percent(1.0) == "100.00%" and percent(0.0) == "0.00%"
    assert percent(None) == "-"


def test_a_count_of_one_is_singular() -> None:
    assert count(1, "row") == "1 row" and count(0, "row") == "0 rows" and count(2, "request") == "2 requests"
