"""The request record every loader produces and the simulator consumes."""

from __future__ import annotations

from dataclasses import dataclass, field

INTERACTIVE = "interactive"
BATCH = "batch"
REQUEST_CLASSES = (INTERACTIVE, BATCH)

PRIORITIES = ("sheddable", "standard", "critical")
"""Tenant priority levels by ``Request.priority`` (0, 1, 2): the three criticalities of the Gateway API
Inference Extension's InferenceModel (Sheddable, Standard, Critical), lowest first."""
SHEDDABLE, STANDARD, CRITICAL = range(3)


def priority_name(level: int) -> str:
    """The name of priority ``level`` (``PRIORITIES``); ValueError outside 0..2."""
    if not 0 <= level < len(PRIORITIES):
        raise ValueError(f"priority must be one of 0..{len(PRIORITIES) - 1}, got {level}")
    return PRIORITIES[level]


@dataclass(slots=True)
class Request:
    """One inference request.

    Attributes:
        arrival_s: arrival time in seconds from the start of the workload (>= 0).
        input_tokens: prompt length in tokens (>= 1).
        output_tokens: tokens to generate (>= 1).
        request_class: SLO class, one of ``REQUEST_CLASSES``.
        priority: tenant priority, an index of ``PRIORITIES`` (0 sheddable, 1 standard, 2 critical).
        hash_ids: prefix-block hashes, chained (equal leading ids = shareable prefix); each block
            covers ``Workload.block_tokens`` tokens. Empty when the trace has none.
        workflow_id: id of the multi-step task this request belongs to, or None.
        step: index of the request within its workflow, or None.
        rid: position in the workload after sorting by arrival (set by ``Workload``).
    """

    arrival_s: float
    input_tokens: int
    output_tokens: int
    request_class: str = INTERACTIVE
    priority: int = 0
    hash_ids: tuple[int, ...] = ()
    workflow_id: int | None = None
    step: int | None = None
    rid: int = -1

    def with_class(self, request_class: str, priority: int) -> Request:
        """A copy with ``request_class`` and ``priority`` replaced (``dataclasses.replace`` costs ~10 us a
        request, a third of building the embedded default's 358k requests)."""
        return Request(self.arrival_s, self.input_tokens, self.output_tokens, request_class, priority,
                       self.hash_ids, self.workflow_id, self.step, self.rid)


@dataclass
class Workload:
    """A list of requests sorted by arrival, with the block size of their ``hash_ids``.

    Attributes:
        requests: requests sorted by ``arrival_s``; ``rid`` is their index.
        block_tokens: tokens per prefix-hash block (Mooncake: 512).
        source: human-readable origin (file path or ``synthetic:<name>``).
    """

    requests: list[Request]
    block_tokens: int = 512
    source: str = ""
    meta: dict[str, float | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.requests.sort(key=lambda r: r.arrival_s)
        for i, r in enumerate(self.requests):
            r.rid = i

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last arrival (0 for an empty workload)."""
        if not self.requests:
            return 0.0
        return self.requests[-1].arrival_s - self.requests[0].arrival_s
