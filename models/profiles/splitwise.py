"""Splitwise's measured performance model: prefill and decode times of Llama-2-70B, TP 2/4/8.

Data (``<data>/splitwise-perf-model/perf_model.csv``, github.com/Mutinifni/splitwise-sim
``data/perf_model.csv`` at 8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0, MIT; Patel et al., ISCA'24):
profiled runs on DGX-A100 (80 GB) and DGX-H100 (SXM) machines, a one-at-a-time sweep around prompt
P=512, batch B=1, output T=128 (P in 128..8192, B in 1..64, T in 128..8192), 5 runs per point.
``prompt_time`` (ms) is the prefill of the whole batch, ``token_time`` (ms) the mean decode iteration.

Each line gives two rows: the prefill (one step of B x P prompt tokens) and the mean decode step
(B sequences whose contexts average P + T/2 tokens), so this source separates the prefill slope from
the decode terms without a prior. Its unbatched prefills run to 8192 tokens (P = 4096 and 8192 lines),
so it is the only source whose rows pin the attention term (``models.profiles.fit``): prefills up to
``MAX_FIT_PREFILL_TOKENS`` are fitted, longer ones held out as the check.
``e2e_time`` is not used: for T >= 512 it implies fewer generated tokens than T (e.g. 574 on a100
TP4 for T = 1024...8192).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from models.profiles.bench import read_csv
from models.profiles.profile import PerformanceProfile, prefill_group, prefill_pairs

PERF_MODEL = "splitwise-perf-model/perf_model.csv"
"""Path relative to the ``--data`` directory."""
MODEL_NAMES: dict[str, str] = {"llama-2-70b": "llama2-70b"}
"""Model key -> ``model`` value of its rows (bloom-176b is not modelled)."""
HARDWARE: dict[str, str] = {"a100-80gb": "a100-80gb", "h100-sxm": "h100-80gb"}
"""GPU key -> ``hardware`` value: a DGX-A100 80 GB holds A100 80GB SXM4 cards, a DGX-H100 H100 SXM5
80 GB cards. ``h100-80gb-pcap`` is left out: it is derived, not measured (its token_time and
e2e_time equal h100-80gb's line by line, its prompt_time is exactly 1.3 x)."""
HELD_OUT = {"prompt_size": 1024, "batch_size": 8, "token_size": 1024}
"""A line is held out if it is the sweep's point at any of these values (one per axis)."""
MAX_FIT_PREFILL_TOKENS = 4096
"""Unbatched prefills longer than this (the P = 8192 lines) are held out of the fit: the check of the
fitted attention term on prompts twice the longest it was fitted on."""


@dataclass(frozen=True)
class SplitwiseRow:
    """One measured time of one ``PERF_MODEL`` line: its prefill or its mean decode step.

    Attributes:
        hardware: ``hardware`` column, e.g. ``"a100-80gb"``.
        tensor_parallel: ``tensor_parallel`` column.
        model: ``model`` column.
        prompt: prompt tokens per request (P).
        batch: requests in the batch (B).
        tokens: output tokens per request (T).
        phase: ``"prefill"`` (``prompt_time``) or ``"decode"`` (``token_time``).
        time_s: the measured seconds.
        line: line of ``PERF_MODEL`` (the header is line 1).
    """

    hardware: str
    tensor_parallel: int
    model: str
    prompt: int
    batch: int
    tokens: int
    phase: str
    time_s: float
    line: int

    source = PERF_MODEL

    @property
    def measured(self) -> tuple[float, ...]:
        """The measured seconds this row pins."""
        return (self.time_s,)

    def predict(self, profile: PerformanceProfile) -> tuple[float, ...]:
        """Seconds of the prefill step, or of the mean decode step, under ``profile``."""
        if self.phase == "prefill":
            return (profile.step_time(self.batch * self.prompt, 0, 0, self.batch * prefill_pairs(0, self.prompt)),)
        # Decode step j (1..T-1) reads contexts of P + j tokens: P + T/2 on average.
        return (profile.step_time(0, self.batch, self.batch * (self.prompt + self.tokens // 2)),)

    @property
    def held_out(self) -> bool:
        """Kept out of the fit: the lines of ``HELD_OUT``, and prefills of more than
        ``MAX_FIT_PREFILL_TOKENS`` tokens."""
        if self.phase == "prefill" and self.prompt > MAX_FIT_PREFILL_TOKENS:
            return True
        return (self.prompt, self.batch, self.tokens) != (512, 1, 128) and (
            self.prompt == HELD_OUT["prompt_size"] or self.batch == HELD_OUT["batch_size"]
            or self.tokens == HELD_OUT["token_size"])

    @property
    def group(self) -> str:
        """Row group for per-group errors: ``profile.prefill_group(P)`` for a prefill, else
        ``"decode B=<B>"``."""
        if self.phase == "prefill":
            return prefill_group(self.prompt)
        return f"decode B={self.batch}"

    def doc(self) -> dict[str, object]:
        """The row's reference in ``coefficients.json``: its file, line and phase (the measured values
        stay in the data: the project ships no copy of it)."""
        return {"source": PERF_MODEL, "line": self.line, "phase": self.phase}


def load_rows(data_dir: Path) -> list[SplitwiseRow]:
    """Both rows of every line of ``MODEL_NAMES`` x ``HARDWARE``; exact duplicate lines dropped.

    Raises:
        FileNotFoundError: the data file is missing.
    """
    rows: list[SplitwiseRow] = []
    seen: set[tuple[str, ...]] = set()
    for i, r in read_csv(data_dir / PERF_MODEL):
        if r["model"] not in MODEL_NAMES.values() or r["hardware"] not in HARDWARE.values():
            continue
        key = tuple(r.values())
        if key in seen:  # the base point's 5 runs are each published 3 times
            continue
        seen.add(key)
        shape = (r["hardware"], int(r["tensor_parallel"]), r["model"], int(r["prompt_size"]),
                 int(r["batch_size"]), int(r["token_size"]))
        rows.append(SplitwiseRow(*shape, "prefill", float(r["prompt_time"]) / 1e3, i))
        rows.append(SplitwiseRow(*shape, "decode", float(r["token_time"]) / 1e3, i))
    return rows


def rows_for(rows: list[SplitwiseRow], model: str, gpu: str, tp: int) -> list[SplitwiseRow]:
    """The rows of (model key, GPU key, tensor-parallel degree), in file order."""
    return [r for r in rows if r.model == MODEL_NAMES[model] and r.hardware == HARDWARE[gpu]
            and r.tensor_parallel == tp]


def exclusion(row: SplitwiseRow) -> str | None:
    """Why ``row`` is not used, or None.

    - Prefill of a batch (B > 1): batched prompts cost more than one prompt of the same total length
      (a100 TP4: 4 x 512 tokens take 571 ms, 1 x 2048 402 ms), although their attention pairs are
      fewer (4 x 512 x 513 / 2 against 2048 x 2049 / 2), so they would pull the slope off the
      single-prompt rows. Single prompts of any length are used (long ones pin the attention term).
    - TP 2 at B = 64: an outlier (a100: prompt_time 796 ms against B = 32's 6,600; e2e_time 160 s
      against B = 32's 18.5 s).
    """
    if row.tensor_parallel == 2 and row.batch == 64:
        return "TP 2, B = 64: outlier (prompt_time 0.12 x B = 32's, e2e_time 8.6 x)"
    if row.phase == "prefill" and row.batch > 1:
        return "batched prefill: costs more than one prompt of the same tokens (not linear in tokens)"
    return None

