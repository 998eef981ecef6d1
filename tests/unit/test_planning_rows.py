"""The model's rows appended in bulk (``models.planning._Rows.add_rows``) against the same rows
appended one by one with ``_Rows.add``: the same entries in the same order, so HiGHS gets the same
model."""

from __future__ import annotations

import numpy as np

from models import planning


def _entries(rows: planning._Rows) -> tuple[list[int], list[int], list[float], list[float], list[float]]:
    return rows.rows, rows.cols, rows.vals, rows.lb, rows.ub


def test_add_rows_appends_what_add_would_row_by_row() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        n_rows, n_terms = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        cols = [np.where(rng.random(n_rows) < 0.3, -1, rng.integers(0, 40, n_rows)) for _ in range(n_terms)]
        vals: list[np.ndarray | float] = [rng.normal(size=n_rows) if t % 2 else float(t + 1) for t in range(n_terms)]
        lb, ub = rng.normal(size=n_rows), np.full(n_rows, np.inf)
        bulk, one = planning._Rows(), planning._Rows()
        bulk.add([(3, 2.0)], 0.0, 1.0)  # a row before: the new rows' numbers start after it
        one.add([(3, 2.0)], 0.0, 1.0)
        bulk.add_rows(cols, vals, lb, ub)
        for r in range(n_rows):
            terms = [(int(cols[t][r]), float(np.broadcast_to(vals[t], (n_rows,))[r]))
                     for t in range(n_terms) if cols[t][r] >= 0]
            one.add(terms, float(lb[r]), float(ub[r]))
        assert _entries(bulk) == _entries(one)
