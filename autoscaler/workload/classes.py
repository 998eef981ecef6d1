"""Class/priority assignment and workflow grouping for traces that carry neither.

Class rule (``assign_classes``): a request's *unit* is its workflow if it has one, else the request
itself. Units are taken in order of their first request (by arrival), and
``np.random.default_rng((seed, CLASS_STREAM)).random(n_units) < batch_fraction`` marks the batch ones;
every request of a unit gets that unit's class, so a conversation is wholly interactive or wholly
batch. The stream is its own (``CLASS_STREAM``): drawn from the seed alone, the same numbers would
also decide which units rate thinning keeps (``shaping``), and a trace thinned to 10 % would keep
only batch requests.

Priority rule (same call): batch units are ``sheddable`` (0); an interactive unit is ``critical`` (2)
when ``np.random.default_rng((seed, PRIORITY_STREAM)).random(n_units) < critical_fraction``, else
``standard`` (1), again one draw per unit, so a workflow keeps one priority. The default
20 % batch / 80 % interactive split and the 25 % of interactive units that are critical (so 20 % of
all units) are assumptions, not measurements: none of the public traces labels classes or tenants.

Workflow rule (``group_workflows``), for traces with chained prefix hashes (Mooncake): a request R
*continues* an earlier request E when R's ``hash_ids`` start with all of E's complete blocks
(the first floor(E.input_tokens / block_tokens) ids) and the last of those ids is not *shared*, i.e.
present in fewer than ``shared_min_fraction`` (default 1 %) of all requests: a system prompt that many
users send must not link strangers. On Mooncake only id 0 (in every request) is shared; the next most
common id is in 43 of 12,031 requests (0.36 %). Because ids are chained, a run ending in an unshared id
is private to one line of conversation. The threshold is statistical: below ~1 / shared_min_fraction
requests every id counts as shared, so pass a larger fraction for tiny workloads. R joins the workflow of the E
with the longest such run (ties: the latest E). Workflow ids count up in order of first arrival;
``step`` is the request's 0-based arrival order within its workflow; a request that continues nothing
starts a new workflow (possibly of one step).

Why complete blocks, not the full list: a follow-up turn appends text, so the earlier request's last,
partial block is re-hashed. On the conversation trace (commit 3cca71d, 12,031 requests) only 12
requests start with an earlier request's full ``hash_ids``, while 3,975 start with its complete blocks.
The rule finds 8,056 workflows, mean 1.49 steps; 2,012 have >= 2 steps (5,987 requests, mean 2.98
steps, max 43). A further 683 requests share >= 2 leading blocks with an earlier one but branch off
before its end (median 22 % of its blocks); they are left as new workflows. Grouping by "same first
two ids" instead would give 7,373 workflows (mean 1.63 steps) and link those branches.

Azure traces have no hashes, so ``group_workflows`` leaves ``workflow_id``/``step`` as None: nothing in
(timestamp, context, generated) identifies a conversation defensibly.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from autoscaler.workload.types import BATCH, CRITICAL, INTERACTIVE, SHEDDABLE, STANDARD, Request, Workload

SHARED_MIN_FRACTION = 0.01  # see the workflow rule: ids in >= 1 % of requests are a common prompt


# Independent random streams per use of a seed (numpy seeds a generator from the tuple's entropy).
CLASS_STREAM = 1
SHAPE_STREAM = 2
PRIORITY_STREAM = 3
CRITICAL_FRACTION = 0.25


def unit_index(requests: list[Request]) -> np.ndarray:
    """Index of each request's unit (its workflow, else itself), numbered by first appearance."""
    seen: dict[tuple[str, int], int] = {}
    out = np.empty(len(requests), dtype=np.int64)
    for i, r in enumerate(requests):
        key = ("w", r.workflow_id) if r.workflow_id is not None else ("r", i)
        out[i] = seen.setdefault(key, len(seen))
    return out


def assign_classes(
    workload: Workload,
    batch_fraction: float = 0.2,
    seed: int = 0,
    critical_fraction: float = CRITICAL_FRACTION,
) -> Workload:
    """Return a copy of ``workload`` with ``request_class`` and ``priority`` set by the rules above.

    Args:
        workload: requests (not modified).
        batch_fraction: probability that a unit (workflow or lone request) is batch, in [0, 1].
        seed: seed of the draws; the same workload and seed always give the same classes and priorities.
        critical_fraction: probability that an interactive unit is critical, in [0, 1].

    Raises:
        ValueError: ``batch_fraction`` or ``critical_fraction`` outside [0, 1].
    """
    for name, x in (("batch_fraction", batch_fraction), ("critical_fraction", critical_fraction)):
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {x}")
    units = unit_index(workload.requests)
    n_units = int(units.max()) + 1 if len(units) else 0
    is_batch = np.random.default_rng((seed, CLASS_STREAM)).random(n_units) < batch_fraction
    is_critical = np.random.default_rng((seed, PRIORITY_STREAM)).random(n_units) < critical_fraction
    batch = is_batch[units].tolist()
    critical = is_critical[units].tolist()
    requests = [
        r.with_class(BATCH, SHEDDABLE) if b else r.with_class(INTERACTIVE, CRITICAL if c else STANDARD)
        for r, b, c in zip(workload.requests, batch, critical, strict=True)
    ]
    return Workload(requests, workload.block_tokens, workload.source, dict(workload.meta))


def shared_ids(requests: list[Request], min_fraction: float = SHARED_MIN_FRACTION) -> set[int]:
    """Hash ids present in at least ``min_fraction`` of ``requests`` (e.g. a common system prompt)."""
    return shared_of(Counter(h for r in requests for h in set(r.hash_ids)), len(requests), min_fraction)


def shared_of(counts: Counter[int], n: int, min_fraction: float = SHARED_MIN_FRACTION) -> set[int]:
    """The ids of ``counts`` (id -> requests holding it, of ``n``) in at least ``min_fraction`` of them."""
    return {h for h, c in counts.items() if c >= min_fraction * n}


def workflow_steps(rows: Iterable[tuple[int, Sequence[int]]], shared: set[int],
                   block_tokens: int) -> Iterator[tuple[int | None, int | None]]:
    """(workflow id, step) of each (input_tokens, hash_ids) of ``rows`` in arrival order, by the
    continuation rule (module docstring; (None, None) without hash ids); ``group_workflows``' rule
    for requests read one at a time. The trie it keeps grows with the hash ids seen."""
    child: dict[tuple[int, int], int] = {}  # (trie node, hash id) -> child node; node 0 is the root
    owner: dict[int, int] = {}  # trie node -> workflow whose request has that complete-block prefix
    steps: list[int] = []  # steps so far per workflow
    for input_tokens, hash_ids in rows:
        if not hash_ids:
            yield None, None
            continue
        node, wf = 0, None
        for h in hash_ids:
            nxt = child.get((node, h))
            if nxt is None:
                break
            node = nxt
            if node in owner:
                wf = owner[node]  # deepest match wins
        if wf is None:
            wf = len(steps)
            steps.append(0)
        step = steps[wf]
        steps[wf] += 1
        yield wf, step

        complete = min(input_tokens // block_tokens, len(hash_ids))
        if complete and hash_ids[complete - 1] not in shared:
            node = 0
            for h in hash_ids[:complete]:
                node = child.setdefault((node, h), len(child) + 1)
            owner[node] = wf


def group_workflows(workload: Workload, shared_min_fraction: float = SHARED_MIN_FRACTION) -> Workload:
    """Return a copy of ``workload`` with ``workflow_id``/``step`` set by the continuation rule above.

    Args:
        workload: requests (not modified); those without ``hash_ids`` get ``workflow_id = step = None``.
        shared_min_fraction: fraction of requests (in (0, 1]) an id must appear in to count as shared.

    Runs in O(total hash ids) with a prefix trie.

    Raises:
        ValueError: ``shared_min_fraction`` outside (0, 1].
    """
    if not 0 < shared_min_fraction <= 1:
        raise ValueError(f"shared_min_fraction must be in (0, 1], got {shared_min_fraction}")
    reqs = workload.requests
    shared = shared_ids(reqs, shared_min_fraction)
    steps = workflow_steps(((r.input_tokens, r.hash_ids) for r in reqs), shared, workload.block_tokens)
    out = [dataclasses.replace(r, workflow_id=wf, step=step) for r, (wf, step) in zip(reqs, steps, strict=True)]
    return Workload(out, workload.block_tokens, workload.source, dict(workload.meta))
