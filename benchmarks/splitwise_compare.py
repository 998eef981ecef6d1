"""Side by side with SplitwiseSim: TTFT, TBT and E2E p50/p99 of this simulator and of SplitwiseSim on
the Azure LLM inference traces 2023 (conversation and code) at their recorded rate (1x), Llama-2-70B
TP 8 on static fleets of 3 DGX-A100 and 2 DGX-H100.

SplitwiseSim (Patel et al., "Splitwise", ISCA 2024; github.com/Mutinifni/splitwise-sim, commit
8f99e7d) is not part of this project and nothing of it is imported or copied here: this script writes
the traces in its input format, runs this simulator, and reads SplitwiseSim's per-request output
(``detailed/0.csv``) from wherever it was run. To produce the peer's outputs:

    python benchmarks/splitwise_compare.py --write-peer-traces ../splitwise-sim/traces
    cd ../splitwise-sim        # a clone of splitwise-sim at 8f99e7d with its own venv
    for t in azure_conv azure_code; do for f in "3 0" "0 2"; do set -- $f
      .venv/bin/python run.py applications.0.scheduler=token_jsq \\
        applications.0.model_architecture=llama2-70b applications.0.model_size=llama2-70b-fp16 \\
        cluster=half_half cluster.servers.0.count=$1 cluster.servers.1.count=$2 \\
        start_state=baseline performance_model=db trace.filename=$t seed=0 debug=True
    done; done

(``scripts/run_baseline_a.sh`` / ``run_baseline_h.sh`` and ``configs/experiment/baseline_*_costopt.yaml``
of splitwise-sim 8f99e7d, with its default BLOOM-176B switched to Llama-2-70B, and its fleet sizes
and synthetic 2-minute traces to these fleets and the real traces; run without ``--multirun``, so
without Ray.) Then

    python benchmarks/splitwise_compare.py --peer ../splitwise-sim/results

prints one row per trace x fleet x metric x percentile: ours, the peer's, and ours / peer. SplitwiseSim
writes ``results/<seed>/baseline/<trace>/<A100s>_<H100s>/llama2-70b/token_jsq/detailed/0.csv``;
``--peer`` names that ``results`` folder. Without ``--peer`` only our figures are printed. With
``debug=True`` (which changes none of its results) SplitwiseSim also logs every iteration of every
instance (``instances/0/<instance>.csv`` beside ``detailed/``); a second table then summarises them
(``iteration_summary``). ``pip install --no-deps hydra-ray-launcher==1.2.1`` in its venv: its
``configs/config.yaml`` configures the Ray launcher, which Hydra must find even for a single run
(Ray itself is not needed).

Definitions (the same for both, from each request's arrival, first-token and last-token times):
TTFT = first token - arrival; E2E = last token - arrival; TBT = (E2E - TTFT) / (output tokens - 1),
the request's mean time between tokens (vLLM's TPOT), over requests of more than one output token.
SplitwiseSim's own ``tbt_times`` divide by the output tokens instead (``scheduler.py``,
``get_results``), which reads low by 1/output; it is recomputed here from its ``response_times``,
``ttft_times`` and ``token_sizes``. Percentiles: ``numpy.percentile`` (linear), as SplitwiseSim's
``utils.get_statistics``.

Our fleet (``fleet_config``): one replica per DGX (8 GPUs, TP 8, as SplitwiseSim's ``baseline`` start
state puts one TP-8 instance on each server), profiles ``llama-2-70b/a100-80gb/tp8`` and
``llama-2-70b/h100-sxm/tp8`` (fitted on the same ``perf_model.csv`` SplitwiseSim interpolates), the
engine limits of SplitwiseSim's ``configs/start_state/baseline.yaml`` (512 sequences, 2048 tokens a
step), and a KV pool of a vLLM on 8 x 80 GB: (0.9 x 80 GB - 17.2 GB of weights - ~4 GB of activations)
x 8 / 327,680 bytes a token (80 layers x 8 KV heads x 128 x 2 x 2 bytes) = 1.24 M tokens. Every
replica is ready at 0; no client timeout fires (it is set past the trace), no request is rejected
(``max_model_len`` 32768), no admission control.

P/D (``--pd``; docs/simulator.md, "Prefill/decode disaggregation"): the paper's Splitwise designs
(``PD_FLEETS``): prompt and token machines, one TP-8 instance a server, SplitwiseSim's ``splitwise``
start state (same engine limits as ``baseline``) and its ``kv_jsq`` scheduler, which ships every
request's KV from the prompt instance with the fewest pending requests to the token instance with the
fewest (``scheduler.py``, ``KVJSQScheduler``). The paper's scripts run ``mixed_pool``, which also lends
instances across the pools when a prompt queue is long or token memory full; that has no counterpart
here, so ``kv_jsq``, the pure split. Ours: the same servers as ``roles`` pools of prefill and decode
replicas, least-outstanding picks in each pool, every request prefilled remotely, a link read in the
peer's transfer time (``matched_link_gbps``, no fixed latency). ``--peer-commands`` prints
SplitwiseSim's command per trace and fleet:

    python benchmarks/splitwise_compare.py --pd --peer-commands     # run each in ../splitwise-sim
    python benchmarks/splitwise_compare.py --pd --peer ../splitwise-sim/results

The table then adds ``PD_METRICS``: TTFT and TBT counted from the prompt's prefill end, SplitwiseSim's
first token; a second table (``format_order``) counts the prefills that finished out of arrival order on
each prefill instance (``out_of_order``: ours by prefill replica, SplitwiseSim's from the ``PROMPT`` rows of
its ``request_nodes.csv``, ``peer_prefill_order``).

Diagnostics (docs/simulator.md, "Side by side with SplitwiseSim"): ``--flat-decode`` runs ours with a
decode step flat in batch and context, as SplitwiseSim's is (its token-time interpolation is keyed by
prompt x batch tokens and called with the number of decodes, so every decode batch reads about its
B = 1 row): the profile's ``decode_s_per_seq`` set to 0 and ``bandwidth_efficiency`` to 1 (the context
term then adds under 1 ms at 40k context tokens). ``--prefill-scale X`` multiplies the profiles'
prefill slope by X. Both run through a profile file (``models/profiles/profile_file.py``) written
from the shipped entry, so the simulator itself is unchanged.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import json
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autoscaler.config import FleetConfig
from autoscaler.config.loading import parse_config
from autoscaler.simulate import run_simulation
from autoscaler.simulator.disagg import PrefillReplica
from autoscaler.simulator.engine import SimRequest
from autoscaler.simulator.fleet import FleetSimulator
from autoscaler.workload.azure import load_azure
from autoscaler.workload.types import Workload
from controllers.static import StaticController
from models.profiles.profile import shipped_entries

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' own modules
from provenance import stamp

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "azure-llm-2023"

TRACES = {"azure_conv": "AzureLLMInferenceTrace_conv.csv", "azure_code": "AzureLLMInferenceTrace_code.csv"}


@dataclass(frozen=True)
class Fleet:
    """A static fleet of one DGX type: ``name`` (its label), ``variant``/``gpu``/``profile`` (ours),
    ``count`` replicas, and SplitwiseSim's ``(A100 servers, H100 servers)`` for the same fleet."""

    name: str
    variant: str
    gpu: str
    profile: str
    count: int
    peer_servers: tuple[int, int]


FLEETS = (
    Fleet("3xDGX-A100", "a100", "A100-80GB", "llama-2-70b/a100-80gb/tp8", 3, (3, 0)),
    Fleet("2xDGX-H100", "h100", "H100-SXM", "llama-2-70b/h100-sxm/tp8", 2, (0, 2)),
)
KV_CACHE_TOKENS = 1_240_000  # module docstring: a vLLM's pool on 8 x 80 GB for Llama-2-70B
PEER_OFFSET_S = 1.0  # added to every arrival of a peer trace (write_peer_trace)
METRICS = ("TTFT", "TBT", "E2E")
PD_METRICS = ("TTFT-P", "TBT-P")
"""With ``--pd``, beside ``METRICS``: TTFT and TBT from the end of the prompt's prefill instead of the first
token. SplitwiseSim's first token is its prompt task's (``task.py``, ``PromptTask.complete`` sets the
request's TTFT), before the KV moves; ours is the decode replica's, after the read and one step of the
decode replica (docs/simulator.md, "TTFT convention"). For the peer ``-P`` equals the plain metric."""
PERCENTILES = (50, 99)


@dataclass(frozen=True)
class Latencies:
    """Per completed request: ``ttft_s``, ``e2e_s`` (seconds from arrival), ``output_tokens`` and, where
    known, ``prefilled_s`` (seconds from arrival to the end of the prompt's prefill); arrays of one length."""

    ttft_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: np.ndarray
    prefilled_s: np.ndarray | None = None
    prefill_order: tuple[int, int] | None = None
    """Where known, ``out_of_order``'s count for the run's prefills: (pairs out of arrival order, pairs)."""

    def __post_init__(self) -> None:
        if not len(self.ttft_s) == len(self.e2e_s) == len(self.output_tokens):
            raise ValueError(f"ttft_s, e2e_s and output_tokens differ in length: {len(self.ttft_s)}, "
                             f"{len(self.e2e_s)}, {len(self.output_tokens)}")
        if self.prefilled_s is not None and len(self.prefilled_s) != len(self.ttft_s):
            raise ValueError(f"prefilled_s has {len(self.prefilled_s)} values for {len(self.ttft_s)} requests")

    def metric(self, name: str) -> np.ndarray:
        """The values of ``name`` (``METRICS`` or ``PD_METRICS``), seconds; TBT over requests of more than
        one token. ``TTFT-P`` and ``TBT-P`` count from the end of the prompt's prefill instead of the
        first token (``prefilled_s``; SplitwiseSim's convention, ``PD_METRICS``).

        Raises:
            ValueError: an unknown name, or a ``-P`` metric without ``prefilled_s``.
        """
        first = self.ttft_s
        if name.endswith("-P"):
            if self.prefilled_s is None:
                raise ValueError(f"{name} needs the prefill-end times (prefilled_s), which these latencies lack")
            first, name = self.prefilled_s, name[:-2]
        if name == "TTFT":
            return first
        if name == "E2E":
            return self.e2e_s
        if name == "TBT":
            many = self.output_tokens > 1
            return (self.e2e_s[many] - first[many]) / (self.output_tokens[many] - 1)
        raise ValueError(f"unknown metric {name!r}; expected one of {', '.join(METRICS + PD_METRICS)}")


Row = tuple[str, str, str, int, float, float | None, float | None]


def table(ours: Mapping[tuple[str, str], Latencies], peer: Mapping[tuple[str, str], Latencies],
          metrics: Sequence[str] = METRICS) -> list[Row]:
    """One row per (trace, fleet) of ``ours`` (in its order) x metric (``metrics``, in order) x percentile:
    ``(trace, fleet, metric, percentile, ours_s, peer_s, ours / peer)``, the last two None where ``peer``
    lacks that (trace, fleet). Raises ``ValueError`` for a (trace, fleet) with no value of a metric."""
    rows: list[Row] = []
    for key, lat in ours.items():
        other = peer.get(key)
        for name in metrics:
            mine = lat.metric(name)
            theirs = None if other is None else other.metric(name)
            for side, v in (("ours", mine), ("peer", theirs)):
                if v is not None and len(v) == 0:
                    raise ValueError(f"{key[0]} on {key[1]}: no {name} values ({side})")
            for q in PERCENTILES:
                a = float(np.percentile(mine, q))
                b = None if theirs is None else float(np.percentile(theirs, q))
                rows.append((key[0], key[1], name, q, a, b, None if b is None else a / b))
    return rows


def format_table(rows: Iterable[Row]) -> str:
    """A Markdown table of ``table``'s rows, seconds to three significant figures, ratios to two decimals."""
    out = ["| trace | fleet | metric | ours (s) | peer (s) | ours / peer |", "|---|---|---|---:|---:|---:|"]
    for trace, fleet, name, q, a, b, r in rows:
        out.append(f"| {trace} | {fleet} | {name} p{q} | {a:.3g} | {'-' if b is None else f'{b:.3g}'} | "
                   f"{'-' if r is None else f'{r:.2f}'} |")
    return "\n".join(out)


PEER_KV_BYTES_PER_TOKEN = 2 * 8192 * 80 * 2
"""SplitwiseSim's KV bytes per token of Llama-2-70B: 2 x hidden size x layers x 2 bytes
(``request.py``, ``estimate_kv_cache_size``, with ``configs/model_repo/architectures/llama2-70b.yaml``),
all 64 heads' keys and values: it has no grouped-query attention, so 8 x the 327,680 bytes of the
model's 8 KV heads."""


def iteration_summary(paths: Sequence[Path]) -> dict[str, float]:
    """What SplitwiseSim's iteration logs (``debug=True``: ``instances/<app>/<instance>.csv``, one row per
    run of ``num_contiguous_iterations`` iterations from ``iteration_start`` to ``iteration_end``, s)
    show of its scheduling: ``prompt_time_share`` (busy time in iterations carrying a prompt),
    ``prompt_only`` (such iterations with no decode in them: SplitwiseSim gives prompts the batch first
    and preempts decodes that do not fit) and ``blocked_per_prompt_only`` (``blocked_tasks``, preempted
    decodes waiting, in them), ``whole_over_2048`` (prompt iterations over 2048 prompt tokens: a
    prompt runs whole, alone when it exceeds the token budget), ``prompt_iter_p50_s``/``p90``/``p99``
    (their durations), ``decode_step_s`` and ``decode_n`` (decode-only iterations: step time and batch,
    weighted by tokens decoded) and ``kv_tokens_peak`` (peak KV held across instances' memory above
    their weights, in tokens of ``PEER_KV_BYTES_PER_TOKEN``; the largest of any instance).

    Raises:
        ValueError: a file lacks a column, names the file.
    """
    cols = ("iteration_start", "iteration_end", "batch_size", "prompt_tasks_in_batch", "memory", "blocked_tasks",
            "num_contiguous_iterations", "batch_tokens")
    rows: dict[str, list[float]] = {c: [] for c in cols}
    kv_peak = 0.0
    for path in paths:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in cols if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: no column {', '.join(missing)} (expected SplitwiseSim's instance log)")
            mem = []
            for row in reader:
                for c in cols:
                    rows[c].append(float(row[c]))
                mem.append(float(row["memory"]))
        if mem:
            kv_peak = max(kv_peak, (max(mem) - min(mem)) / PEER_KV_BYTES_PER_TOKEN)
    a = {c: np.array(v) for c, v in rows.items()}
    dur = a["iteration_end"] - a["iteration_start"]
    k = a["num_contiguous_iterations"]
    n = a["batch_size"] - a["prompt_tasks_in_batch"]
    pf = a["prompt_tasks_in_batch"] > 0
    prompt_tokens = a["batch_tokens"] - n
    dec = ~pf & (n > 0)
    w = n[dec] * k[dec]
    prompt_only = pf & (n == 0)
    p50, p90, p99 = np.percentile(dur[pf], [50, 90, 99]) if pf.any() else (np.nan,) * 3
    return {
        "prompt_time_share": float(dur[pf].sum() / dur.sum()),
        "prompt_only": float(prompt_only.sum()),
        "prompt_iterations": float(pf.sum()),
        "blocked_per_prompt_only": float(a["blocked_tasks"][prompt_only].mean()) if prompt_only.any() else 0.0,
        "whole_over_2048": float((pf & (prompt_tokens > 2048)).sum()),
        "prompt_iter_p50_s": float(p50), "prompt_iter_p90_s": float(p90), "prompt_iter_p99_s": float(p99),
        "decode_step_s": float(np.sum(w * dur[dec] / k[dec]) / w.sum()) if w.sum() else float("nan"),
        "decode_n": float(np.sum(w * n[dec]) / w.sum()) if w.sum() else float("nan"),
        "kv_tokens_peak": kv_peak,
    }


def split_roles(paths: Sequence[Path]) -> dict[str, list[Path]]:
    """SplitwiseSim's instance logs of a P/D run by role, its ``tag`` column (``prompt`` or ``token``,
    the ``splitwise`` start state's tags): role -> the files of that role's instances, in ``paths``' order.

    Raises:
        ValueError: a file without ``tag``, or with no row or more than one tag, named.
    """
    roles: dict[str, list[Path]] = {}
    for path in paths:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            if "tag" not in (reader.fieldnames or []):
                raise ValueError(f"{path}: no column tag (expected SplitwiseSim's instance log)")
            tags = {row["tag"] for row in reader}
        if len(tags) != 1:
            raise ValueError(f"{path}: expected one tag, found {sorted(tags) or 'no row'}")
        roles.setdefault(tags.pop(), []).append(path)
    return roles


def out_of_order(instance: Sequence[object], arrival: Sequence[float], prefilled: Sequence[float]) -> tuple[int, int]:
    """How prompts leave each prefill instance's queue: per ``instance`` label, its requests in ``arrival``
    order (equal arrivals in input order), the consecutive pairs whose later arrival finished its prefill
    (``prefilled``) strictly before the earlier one. Returns (such pairs, all pairs); (0, n) is first come,
    first served. Prompts finished in one batch (equal times) are in order. Raises ``ValueError`` for
    sequences of different lengths."""
    if not len(instance) == len(arrival) == len(prefilled):
        raise ValueError(f"instance, arrival and prefilled differ in length: {len(instance)}, {len(arrival)}, "
                         f"{len(prefilled)}")
    ends: dict[object, list[tuple[float, int, float]]] = {}
    for i, (where, a, done) in enumerate(zip(instance, arrival, prefilled, strict=True)):
        ends.setdefault(where, []).append((a, i, done))
    late = pairs = 0
    for rows in ends.values():
        rows.sort()
        pairs += len(rows) - 1
        late += sum(b[2] < a[2] for a, b in itertools.pairwise(rows))
    return late, pairs


def peer_prefill_order(detailed: Path) -> tuple[int, int]:
    """``out_of_order`` of a SplitwiseSim P/D run from ``request_nodes.csv`` beside ``detailed/`` (the
    per-request CSV): its ``PROMPT`` rows' ``runner`` (the prompt instance) and ``completion_timestamp``
    (s), arrival order by ``request_id`` (``write_peer_trace`` numbers requests in arrival order).

    Raises:
        ValueError: a missing column or a value that is not a number, naming the file and line.
        OSError: the file cannot be read.
    """
    path = detailed.parent.parent / "request_nodes.csv"
    where: list[str] = []
    rid: list[float] = []
    done: list[float] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = ("request_id", "node_type", "runner", "completion_timestamp")
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} (expected SplitwiseSim's request_nodes.csv)")
        for row in reader:
            if row["node_type"] != "PROMPT":
                continue
            try:
                rid.append(float(row["request_id"]))
                done.append(float(row["completion_timestamp"]))
            except ValueError as exc:
                raise ValueError(f"{path}: line {reader.line_num}: {exc}") from None
            where.append(row["runner"])
    return out_of_order(where, rid, done)


def format_iterations(summaries: Mapping[tuple[str, str], dict[str, float]]) -> str:
    """A Markdown table of ``iteration_summary`` per (trace, fleet)."""
    out = ["| trace | fleet | prompt iterations (share of busy time) | of them prompt-only | decodes preempted "
           "in each | over 2048 prompt tokens | prompt iteration p50 / p90 / p99 (s) | decode-only step (ms) "
           "at batch | peak KV (tokens) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (trace, fleet), s in summaries.items():
        out.append(f"| {trace} | {fleet} | {s['prompt_iterations']:.0f} ({s['prompt_time_share']:.0%}) | "
                   f"{s['prompt_only']:.0f} | {s['blocked_per_prompt_only']:.1f} | {s['whole_over_2048']:.0f} | "
                   f"{s['prompt_iter_p50_s']:.3f} / {s['prompt_iter_p90_s']:.3f} / {s['prompt_iter_p99_s']:.3f} | "
                   f"{1000 * s['decode_step_s']:.1f} at {s['decode_n']:.1f} | {s['kv_tokens_peak']:,.0f} |")
    return "\n".join(out)


def format_order(ours: Mapping[tuple[str, str], Latencies], peer: Mapping[tuple[str, str], Latencies]) -> str:
    """A Markdown table of each (trace, fleet)'s ``prefill_order`` (``out_of_order``), ours and the peer's
    where known: consecutive arrivals at one prefill instance whose prefills finished in reverse order."""
    def cell(lat: Latencies | None) -> str:
        if lat is None or lat.prefill_order is None:
            return "-"
        late, pairs = lat.prefill_order
        return f"{late:,} of {pairs:,} ({late / pairs:.1%})" if pairs else "no pair"

    out = ["| trace | fleet | prefills out of arrival order, ours | peer |", "|---|---|---:|---:|"]
    for key, lat in ours.items():
        out.append(f"| {key[0]} | {key[1]} | {cell(lat)} | {cell(peer.get(key))} |")
    return "\n".join(out)


def read_peer(path: Path) -> Latencies:
    """SplitwiseSim's ``detailed/<application>.csv``: columns ``response_times`` (E2E, s),
    ``ttft_times`` (s) and ``token_sizes`` (output tokens), one row per completed request. Its TTFT is
    when the prompt task ends (``PD_METRICS``), so ``prefilled_s`` is the TTFT too.

    Raises:
        ValueError: a missing column or a value that is not a number, naming the file and line.
        OSError: the file cannot be read.
    """
    ttft, e2e, out = [], [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        need = ("response_times", "ttft_times", "token_sizes")
        missing = [c for c in need if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} (expected SplitwiseSim's detailed CSV)")
        for row in reader:
            try:
                e2e.append(float(row["response_times"]))
                ttft.append(float(row["ttft_times"]))
                out.append(int(float(row["token_sizes"])))
            except ValueError as exc:
                raise ValueError(f"{path}: line {reader.line_num}: {exc}") from None
    return Latencies(np.array(ttft), np.array(e2e), np.array(out), np.array(ttft))


def peer_path(results: Path, trace: str, fleet: Fleet, seed: int = 0) -> Path:
    """Where SplitwiseSim 8f99e7d writes the per-request CSV of this run (its ``output_dir`` template in
    ``configs/config.yaml``)."""
    a, h = fleet.peer_servers
    return results / str(seed) / "baseline" / trace / f"{a}_{h}" / "llama2-70b" / "token_jsq" / "detailed" / "0.csv"


def write_peer_trace(workload: Workload, path: Path) -> None:
    """``workload`` in SplitwiseSim's trace format (its README, "Request Traces"): ``request_id``,
    ``request_type`` 2 (generative LLM), ``application_id`` 0, ``arrival_timestamp`` (s),
    ``batch_size`` 1, ``prompt_size``, ``token_size``. Arrivals are shifted by ``PEER_OFFSET_S``:
    SplitwiseSim runs an event due at time 0 as it schedules it (``simulator.py``, ``Simulator.schedule``:
    ``delay == 0`` runs at once), so a request arriving at 0 is routed while its trace is read, before any
    instance exists, and the run stops with "No instances available"; latencies count from each
    request's own arrival, so the shift changes none of them."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "request_type", "application_id", "arrival_timestamp", "batch_size",
                    "prompt_size", "token_size"])
        for i, r in enumerate(workload.requests):
            w.writerow([i, 2, 0, repr(r.arrival_s + PEER_OFFSET_S), 1, r.input_tokens, r.output_tokens])


def variant_profile(fleet: Fleet | Pool, folder: Path, flat_decode: bool = False, prefill_scale: float = 1.0) -> str:
    """The profile our ``fleet`` runs: its shipped name, or, with a diagnostic (module docstring), a
    profile file written to ``folder`` from the shipped entry with the decode terms flat and/or the
    prefill slope times ``prefill_scale``. Raises ``ValueError`` for ``prefill_scale`` <= 0."""
    if not prefill_scale > 0:
        raise ValueError(f"prefill_scale must be > 0, got {prefill_scale}")
    if not flat_decode and prefill_scale == 1.0:
        return fleet.profile
    entry = shipped_entries()[fleet.profile]
    c = entry["coefficients"]
    if flat_decode:
        c["decode_s_per_seq"] = 0.0
        c["bandwidth_efficiency"] = 1.0
    c["prefill_s_per_token"] *= prefill_scale
    # one name per content: profiles are loaded once per path (``models.profiles.lookup``)
    path = folder / f"{fleet.variant}{'-flat-decode' if flat_decode else ''}-prefill-x{prefill_scale:g}.json"
    path.write_text(json.dumps(entry))
    return str(path)


def fleet_config(fleet: Fleet, horizon_s: float, profile: str | None = None) -> FleetConfig:
    """Our fleet for ``fleet`` (module docstring); ``horizon_s`` bounds the client timeout from below;
    ``profile`` replaces the fleet's (``variant_profile``)."""
    return parse_config({
        "services": [{
            "name": "llama-2-70b", "model": "meta-llama/Llama-2-70b-hf", "max_model_len": 32768,
            "slo": {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}},
            "variants": [{
                "name": fleet.variant, "gpu": fleet.gpu, "gpus_per_replica": 8, "price_per_gpu_hour": 0.0,
                "min_replicas": fleet.count, "max_replicas": fleet.count, "initial_replicas": fleet.count,
                "kv_cache_tokens": KV_CACHE_TOKENS, "profile": profile or fleet.profile,
            }],
        }],
        "engine": {"max_num_seqs": 512, "max_num_batched_tokens": 2048, "block_size": 16},
        "simulator": {"client_timeout_s": 10 * horizon_s + 3600.0},
    }, source="splitwise_compare")


def completed_latencies(final: Sequence[SimRequest], prefilled: Mapping[SimRequest, float] | None = None
                        ) -> Latencies:
    """``Latencies`` of a run's ``final`` requests, with each one's prefill end from ``prefilled`` (simulated
    s) where given.

    Raises:
        RuntimeError: a request did not complete.
    """
    bad = [sr for sr in final if sr.status != "completed"]
    if bad:
        raise RuntimeError(f"{len(bad)} of {len(final)} requests did not complete (first: {bad[0].status})")
    arrival = np.array([sr.req.arrival_s for sr in final])
    first = np.array([sr.t_first for sr in final], dtype=float)
    last = np.array([sr.t_finish for sr in final], dtype=float)
    out = np.array([sr.req.output_tokens for sr in final])
    handed = None if prefilled is None else np.array([prefilled[sr] for sr in final]) - arrival
    return Latencies(first - arrival, last - arrival, out, handed)


def run_ours(workload: Workload, fleet: Fleet, profile: str | None = None) -> Latencies:
    """Simulate ``workload`` on ``fleet`` (static), with ``profile`` instead of the fleet's if given;
    the latencies of its completed requests.

    Raises:
        RuntimeError: a request did not complete (none should: nothing rejects or times out).
    """
    cfg = fleet_config(fleet, workload.requests[-1].arrival_s if workload.requests else 0.0, profile)
    ctrl = StaticController({cfg.services[0].name: {fleet.variant: fleet.count}},
                            cfg.controller.tick_s, cfg.controller.window_s)
    return completed_latencies(run_simulation(cfg, workload, ctrl, admission="none").sim.final)


@dataclass(frozen=True)
class Pool:
    """One role's replicas in a P/D fleet: ``variant``/``gpu``/``profile`` (ours, as ``Fleet``'s) and
    ``count`` DGX servers, one TP-8 replica each."""

    variant: str
    gpu: str
    profile: str
    count: int


@dataclass(frozen=True)
class PDFleet:
    """A static Splitwise fleet: ``prefill`` and ``decode`` pools (SplitwiseSim's prompt and token
    machines), SplitwiseSim's ``(A100 servers, H100 servers)`` and its ``start_state.split_type``
    (``homogeneous``: the first ``prefill.count`` servers prompt, the next ``decode.count`` token;
    ``heterogeneous``: by SKU, H100 prompt and A100 token, ``configs/start_state/splitwise.yaml``)."""

    name: str
    prefill: Pool
    decode: Pool
    peer_servers: tuple[int, int]
    peer_split: str


A100 = ("a100", "A100-80GB", "llama-2-70b/a100-80gb/tp8")
H100 = ("h100", "H100-SXM", "llama-2-70b/h100-sxm/tp8")
PD_FLEETS = (
    PDFleet("Splitwise-AA-2P1T", Pool(*A100, 2), Pool(*A100, 1), (3, 0), "homogeneous"),
    PDFleet("Splitwise-HH-1P1T", Pool(*H100, 1), Pool(*H100, 1), (0, 2), "homogeneous"),
    PDFleet("Splitwise-HA-1P1T", Pool(*H100, 1), Pool(*A100, 1), (1, 1), "heterogeneous"),
)
"""The paper's three Splitwise designs at the aggregated comparison's sizes (module docstring, "P/D"):
AA with ``scripts/run_splitwise_aa.sh``'s prompt:token ratio (27:13, ~2:1) on the 3 A100 servers of the
aggregated A100 fleet; HH on the 2 H100 servers of the aggregated H100 fleet (``run_splitwise_hh.sh``
runs 1 + 1); HA as ``run_splitwise_ha_example.sh`` (1 A100 + 1 H100, H100 prompt)."""

PEER_SCHEDULER = "kv_jsq"
PEER_TRANSFER_GIB_S = 200.0
"""SplitwiseSim's ``configs/orchestrator_repo/schedulers/kv_jsq.yaml`` ``transfer_bandwidth``, which
``KVJSQScheduler`` reads as GiB/s (x 1024**3, ``scheduler.py``); a flow of the prompt's tokens x
``PEER_KV_BYTES_PER_TOKEN`` on a link of its own, no fixed latency."""


def matched_link_gbps(kv_bytes_per_token: int) -> float:
    """Our link's ``bandwidth_gbps`` for which a read of ``t`` tokens of ``kv_bytes_per_token`` bytes takes
    SplitwiseSim's transfer time, ``t x PEER_KV_BYTES_PER_TOKEN / (PEER_TRANSFER_GIB_S x 2**30)``: its
    bytes a token are 8 x ours for Llama-2-70B (no grouped-query attention), so the same time needs an
    eighth of its bandwidth (214.7 Gb/s for 327,680 bytes). Raises ``ValueError`` for a size <= 0."""
    if kv_bytes_per_token <= 0:
        raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
    return kv_bytes_per_token * 8 * PEER_TRANSFER_GIB_S * 2**30 / (PEER_KV_BYTES_PER_TOKEN * 1e9)


def pd_peer_path(results: Path, trace: str, fleet: PDFleet, seed: int = 0) -> Path:
    """Where SplitwiseSim 8f99e7d writes the per-request CSV of a P/D run (``output_dir`` in
    ``configs/config.yaml``; ``state_type`` ``splitwise_<prompt>_<token>`` from ``start_state``'s
    ``num_instances``, which ``pd_peer_command`` sets to the pools' counts)."""
    a, h = fleet.peer_servers
    state = f"splitwise_{fleet.prefill.count}_{fleet.decode.count}"
    return (results / str(seed) / state / trace / f"{a}_{h}" / "llama2-70b" / PEER_SCHEDULER / "detailed"
            / "0.csv")


def pd_peer_command(trace: str, fleet: PDFleet, seed: int = 0) -> list[str]:
    """SplitwiseSim's ``run.py`` arguments for ``fleet`` on ``trace`` (run in its own folder and venv)."""
    a, h = fleet.peer_servers
    return ["run.py", f"applications.0.scheduler={PEER_SCHEDULER}",
            "applications.0.model_architecture=llama2-70b", "applications.0.model_size=llama2-70b-fp16",
            "cluster=half_half", f"cluster.servers.0.count={a}", f"cluster.servers.1.count={h}",
            "start_state=splitwise", f"start_state.split_type={fleet.peer_split}",
            f"start_state.prompt.num_instances={fleet.prefill.count}",
            f"start_state.token.num_instances={fleet.decode.count}",
            "performance_model=db", f"trace.filename={trace}", f"seed={seed}", "debug=True"]


def pd_fleet_config(fleet: PDFleet, horizon_s: float, prefill_profile: str | None = None,
                    decode_profile: str | None = None) -> FleetConfig:
    """Our fleet for ``fleet``: pools of prefill and decode replicas (no aggregated variant), engine and
    KV as ``fleet_config``, every request prefilled remotely (``non_cached_tokens`` 1: every prompt has
    at least one token and no trace request shares a prefix, as SplitwiseSim's KV schedulers ship every
    request's KV), a link of ``matched_link_gbps`` with no fixed latency; ``*_profile`` replace the
    pools' profiles (``variant_profile``)."""
    kvb = shipped_entries()[fleet.prefill.profile]["kv_bytes_per_token"]

    def pool(p: Pool, role: str, profile: str | None) -> dict[str, object]:
        return {"name": f"{p.variant}-{role}", "gpu": p.gpu, "gpus_per_replica": 8, "price_per_gpu_hour": 0.0,
                "min_replicas": p.count, "max_replicas": p.count, "initial_replicas": p.count,
                "kv_cache_tokens": KV_CACHE_TOKENS, "profile": profile or p.profile}

    return parse_config({
        "services": [{
            "name": "llama-2-70b", "model": "meta-llama/Llama-2-70b-hf", "max_model_len": 32768,
            "slo": {"interactive": {"ttft_s": 2.0, "itl_s": 0.1}, "batch": {"ttft_s": 20.0, "itl_s": 0.25}},
            "variants": [],
            "roles": {
                "prefill": [pool(fleet.prefill, "prefill", prefill_profile)],
                "decode": [pool(fleet.decode, "decode", decode_profile)],
                "non_cached_tokens": 1,
                "kv_transfer": {"bandwidth_gbps": matched_link_gbps(int(kvb)), "latency_s": 0.0},
            },
        }],
        "engine": {"max_num_seqs": 512, "max_num_batched_tokens": 2048, "block_size": 16},
        "simulator": {"client_timeout_s": 10 * horizon_s + 3600.0},
    }, source="splitwise_compare --pd")


def run_ours_pd(workload: Workload, fleet: PDFleet, prefill_profile: str | None = None,
                decode_profile: str | None = None) -> Latencies:
    """Simulate ``workload`` on the P/D ``fleet`` (static pools); the latencies of its completed requests,
    with each one's prefill end (``prefilled_s``, recorded as the prefill replica hands it over:
    ``FleetSimulator.on_prefilled``, wrapped for this run only) and ``prefill_order`` (``out_of_order``
    by prefill replica).

    Raises:
        RuntimeError: a request did not complete, or was not prefilled remotely.
    """
    cfg = pd_fleet_config(fleet, workload.requests[-1].arrival_s if workload.requests else 0.0,
                          prefill_profile, decode_profile)
    ctrl = StaticController({}, cfg.controller.tick_s, cfg.controller.window_s)
    prefilled: dict[SimRequest, float] = {}
    by: dict[SimRequest, int] = {}
    original = FleetSimulator.on_prefilled

    def record(sim: FleetSimulator, sr: SimRequest, replica: PrefillReplica, now: float) -> None:
        prefilled[sr] = now
        by[sr] = replica.rid
        original(sim, sr, replica, now)

    setattr(FleetSimulator, "on_prefilled", record)  # noqa: B010 (a method; mypy refuses assigning to one)
    try:
        run = run_simulation(cfg, workload, ctrl, admission="none")
    finally:
        setattr(FleetSimulator, "on_prefilled", original)  # noqa: B010
    final = run.sim.final
    local = sum(sr not in prefilled for sr in final)
    if local:
        raise RuntimeError(f"{local} of {len(final)} requests were not prefilled remotely")
    lat = completed_latencies(final, prefilled)
    order = out_of_order([by[sr] for sr in final], [sr.req.arrival_s for sr in final], [prefilled[sr] for sr in final])
    return dataclasses.replace(lat, prefill_order=order)


def run_fleet(workload: Workload, fleet: Fleet | PDFleet, folder: Path, flat_decode: bool = False,
              prefill_scale: float = 1.0) -> Latencies:
    """``run_ours`` or ``run_ours_pd`` on ``fleet``, its profiles with the diagnostics (``variant_profile``,
    files written to ``folder``)."""
    if isinstance(fleet, PDFleet):
        return run_ours_pd(workload, fleet, variant_profile(fleet.prefill, folder, flat_decode, prefill_scale),
                           variant_profile(fleet.decode, folder, flat_decode, prefill_scale))
    return run_ours(workload, fleet, variant_profile(fleet, folder, flat_decode, prefill_scale))


def peer_iterations(detailed: Path, by_role: bool) -> dict[str, dict[str, float]]:
    """``iteration_summary`` of the instance logs beside SplitwiseSim's per-request CSV ``detailed``
    (``instances/0/*.csv``; none without ``debug=True``): one under the label ``""``, or with ``by_role``
    one per role under ``" prompt"`` and ``" token"`` (``split_roles``). Raises as those do."""
    logs = sorted((detailed.parent.parent / "instances" / "0").glob("*.csv"))
    if not logs:
        return {}
    if not by_role:
        return {"": iteration_summary(logs)}
    return {f" {role}": iteration_summary(paths) for role, paths in split_roles(logs).items()}


def read_peer_run(detailed: Path, pd: bool) -> Latencies:
    """``read_peer`` of ``detailed``, with a P/D run's (``pd``) ``prefill_order`` (``peer_prefill_order``).
    Raises as those do."""
    lat = read_peer(detailed)
    return dataclasses.replace(lat, prefill_order=peer_prefill_order(detailed)) if pd else lat


def peer_file(results: Path, trace: str, fleet: Fleet | PDFleet) -> Path:
    """SplitwiseSim's per-request CSV of ``fleet`` on ``trace`` under ``results`` (``peer_path``,
    ``pd_peer_path``)."""
    return pd_peer_path(results, trace, fleet) if isinstance(fleet, PDFleet) else peer_path(results, trace, fleet)


def select_fleets(pd: bool, names: Sequence[str] | None) -> list[Fleet | PDFleet]:
    """The P/D (``pd``) or aggregated fleets named in ``names`` (None: all of them), in their order.
    Raises ``ValueError`` naming the mode's fleets when a name is not one of them."""
    mode: Sequence[Fleet | PDFleet] = PD_FLEETS if pd else FLEETS
    if names is not None and any(n not in [f.name for f in mode] for n in names):
        raise ValueError(f"--fleets: the {'P/D' if pd else 'aggregated'} fleets are {', '.join(f.name for f in mode)}")
    return [f for f in mode if names is None or f.name in names]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--data", type=Path, default=DATA,
                    help="folder of the Azure 2023 traces (default: ../shared/data/azure-llm-2023)")
    ap.add_argument("--peer", type=Path, default=None,
                    help="SplitwiseSim's results folder (module docstring); without it only our figures")
    ap.add_argument("--write-peer-traces", type=Path, default=None, metavar="DIR",
                    help="write the traces in SplitwiseSim's format to DIR (azure_conv.csv, azure_code.csv) and exit")
    ap.add_argument("--traces", nargs="+", choices=list(TRACES), default=list(TRACES), help="traces to run")
    ap.add_argument("--pd", action="store_true",
                    help="the Splitwise prefill/decode fleets (PD_FLEETS) instead of the aggregated ones")
    ap.add_argument("--fleets", nargs="+", choices=[f.name for f in FLEETS + PD_FLEETS], default=None,
                    help="fleets to run (default: every fleet of the mode)")
    ap.add_argument("--peer-commands", action="store_true",
                    help="with --pd: print SplitwiseSim's run.py command for each trace and fleet, and exit")
    ap.add_argument("--flat-decode", action="store_true",
                    help="diagnostic: our decode step flat in batch and context, as SplitwiseSim's (module docstring)")
    ap.add_argument("--prefill-scale", type=float, default=1.0,
                    help="diagnostic: multiply our profiles' prefill slope by this (default 1)")
    args = ap.parse_args(argv)
    if not args.prefill_scale > 0:
        ap.error(f"--prefill-scale must be > 0, got {args.prefill_scale}")
    try:
        fleets = select_fleets(args.pd, args.fleets)
    except ValueError as exc:
        ap.error(str(exc))
    if args.peer_commands:
        if not args.pd:
            ap.error("--peer-commands needs --pd (the aggregated commands are in the module docstring)")
        for t in args.traces:
            for f in fleets:
                assert isinstance(f, PDFleet)
                print(".venv/bin/python " + " ".join(pd_peer_command(t, f)))
        return
    workloads = {t: load_azure(args.data / TRACES[t]) for t in args.traces}
    if args.write_peer_traces is not None:
        args.write_peer_traces.mkdir(parents=True, exist_ok=True)
        for t, wl in workloads.items():
            write_peer_trace(wl, args.write_peer_traces / f"{t}.csv")
            print(f"wrote {args.write_peer_traces / f'{t}.csv'} ({len(wl.requests)} requests)")
        return

    if args.peer is not None:  # before any simulation: a wrong folder is found at once
        for t in args.traces:
            for fleet in fleets:
                if not peer_file(args.peer, t, fleet).is_file():
                    sys.exit(f"error: {peer_file(args.peer, t, fleet)}: no SplitwiseSim output for {t} on "
                             f"{fleet.name} (module docstring)")
    diag = [d for d, on in (("flat decode", args.flat_decode),
                            (f"prefill x{args.prefill_scale:g}", args.prefill_scale != 1.0)) if on]
    print(f"{Path(__file__).name}: {stamp()}" + (f"; ours with {', '.join(diag)}" if diag else ""), flush=True)
    ours: dict[tuple[str, str], Latencies] = {}
    peer: dict[tuple[str, str], Latencies] = {}
    iterations: dict[tuple[str, str], dict[str, float]] = {}
    folder = tempfile.TemporaryDirectory()
    for t in args.traces:
        for fleet in fleets:
            ours[(t, fleet.name)] = run_fleet(workloads[t], fleet, Path(folder.name), args.flat_decode,
                                              args.prefill_scale)
            if args.peer is not None:
                p = peer_file(args.peer, t, fleet)
                try:
                    peer[(t, fleet.name)] = read_peer_run(p, isinstance(fleet, PDFleet))
                    for label, summary in peer_iterations(p, isinstance(fleet, PDFleet)).items():
                        iterations[(t, fleet.name + label)] = summary
                except (OSError, ValueError) as exc:
                    sys.exit(f"error: {exc}")
                if len(peer[(t, fleet.name)].ttft_s) != len(workloads[t].requests):
                    print(f"warning: {p}: {len(peer[(t, fleet.name)].ttft_s)} requests completed of "
                          f"{len(workloads[t].requests)}", file=sys.stderr)
            print(f"ran {t} on {fleet.name}", file=sys.stderr, flush=True)
    folder.cleanup()
    print(report(ours, peer, iterations, args.pd))


def report(ours: Mapping[tuple[str, str], Latencies], peer: Mapping[tuple[str, str], Latencies],
           iterations: Mapping[tuple[str, str], dict[str, float]], pd: bool) -> str:
    """What ``main`` prints after the runs: ``format_table``, with ``pd`` ``PD_METRICS`` and ``format_order``,
    then ``format_iterations`` where there are peer logs."""
    parts = [format_table(table(ours, peer, METRICS + PD_METRICS if pd else METRICS))]
    if pd:
        parts.append(format_order(ours, peer))
    if iterations:
        parts.append("SplitwiseSim's iterations (debug=True logs):\n" + format_iterations(iterations))
    return "\n\n".join(parts)

if __name__ == "__main__":
    main()
