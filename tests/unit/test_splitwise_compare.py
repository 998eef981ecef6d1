"""``benchmarks/splitwise_compare.py``'s own logic on hand-made inputs: the metrics and percentiles of its
table, the ratios, reading SplitwiseSim's per-request CSV and writing its trace format. No SplitwiseSim
and no simulation run here."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from support.paths import ROOT

from autoscaler.workload.types import Request, Workload

SPEC = importlib.util.spec_from_file_location("bench_splitwise_compare", ROOT / "benchmarks" / "splitwise_compare.py")
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
sys.modules["bench_splitwise_compare"] = bench  # its dataclasses look their module up
SPEC.loader.exec_module(bench)

# Three requests: TTFT 1, 2, 3 s; E2E 3, 2, 9 s; 3, 1 and 4 output tokens.
OURS = bench.Latencies(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 9.0]), np.array([3, 1, 4]))
# The peer twice as slow on every request.
PEER = bench.Latencies(2 * OURS.ttft_s, 2 * OURS.e2e_s, OURS.output_tokens)


def test_tbt_is_the_mean_gap_after_the_first_token_without_one_token_requests() -> None:
    # (3 - 1) / (3 - 1) = 1 and (9 - 3) / (4 - 1) = 2; the one-token request has no gap
    assert OURS.metric("TBT").tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="unknown metric 'ITL'"):
        OURS.metric("ITL")


def test_table_by_hand() -> None:
    rows = bench.table({("conv", "a100"): OURS}, {("conv", "a100"): PEER})
    got = {(m, q): (a, b, r) for _, _, m, q, a, b, r in rows}
    # linear percentiles by hand: p50 of 3 sorted values is the middle one, p99 sits 0.98 of the way
    # from the 2nd to the 3rd; of 2 values, p50 is their mean and p99 0.99 of the way
    want = {("TTFT", 50): 2.0, ("TTFT", 99): 2.98, ("TBT", 50): 1.5, ("TBT", 99): 1.99,
            ("E2E", 50): 3.0, ("E2E", 99): 3.0 + 0.98 * 6.0}
    assert set(got) == set(want)
    for key, v in want.items():
        a, b, r = got[key]
        assert a == pytest.approx(v)
        assert b == pytest.approx(2 * v)
        assert r == pytest.approx(0.5)
    assert [r[:4] for r in rows][:2] == [("conv", "a100", "TTFT", 50), ("conv", "a100", "TTFT", 99)]


def test_table_without_the_peer_has_no_peer_column_and_an_empty_metric_is_an_error() -> None:
    rows = bench.table({("code", "h100"): OURS}, {})
    assert len(rows) == 6 and all(r[5] is None and r[6] is None for r in rows)
    assert "| code | h100 | E2E p99 | 8.88 | - | - |" in bench.format_table(rows)
    one_token = bench.Latencies(np.array([1.0]), np.array([1.0]), np.array([1]))
    with pytest.raises(ValueError, match="code on h100: no TBT values"):
        bench.table({("code", "h100"): one_token}, {})


def test_read_peer_takes_e2e_ttft_and_output_from_its_columns(tmp_path: Path) -> None:
    p = tmp_path / "0.csv"
    # SplitwiseSim's detailed CSV header (scheduler.py get_results); tbt_times is ignored (recomputed)
    p.write_text("request_ids,response_times,queue_times,ttft_times,tbt_times,nth_token_overheads,"
                 "prompt_sizes,token_sizes\n0,2.5,0,0.5,0.5,0.0,4096,5\n1,1.0,0,0.25,0.75,0.0,2048,1\n")
    lat = bench.read_peer(p)
    assert lat.e2e_s.tolist() == [2.5, 1.0] and lat.ttft_s.tolist() == [0.5, 0.25]
    assert lat.metric("TBT").tolist() == [0.5]  # (2.5 - 0.5) / 4
    p.write_text("response_times,ttft_times,token_sizes\n1.0,x,3\n")
    with pytest.raises(ValueError, match=r"0\.csv: line 2: "):
        bench.read_peer(p)
    p.write_text("response_times,token_sizes\n1.0,3\n")
    with pytest.raises(ValueError, match="no column ttft_times"):
        bench.read_peer(p)


def test_peer_trace_rows_are_its_documented_columns_shifted_by_the_offset(tmp_path: Path) -> None:
    wl = Workload([Request(0.0, 100, 7), Request(2.5, 30, 1)])
    p = tmp_path / "t.csv"
    bench.write_peer_trace(wl, p)
    rows = list(csv.DictReader(p.open()))
    assert [(r["request_id"], r["request_type"], r["application_id"], float(r["arrival_timestamp"]),
             r["batch_size"], r["prompt_size"], r["token_size"]) for r in rows] == [
        ("0", "2", "0", 1.0, "1", "100", "7"), ("1", "2", "0", 3.5, "1", "30", "1")]


def test_peer_path_is_its_output_dir_template() -> None:
    fleet = bench.FLEETS[1]
    assert bench.peer_path(Path("results"), "azure_code", fleet) == Path(
        "results/0/baseline/azure_code/0_2/llama2-70b/token_jsq/detailed/0.csv")


def test_diagnostic_profiles_change_only_the_terms_they_name(tmp_path: Path) -> None:
    from models.profiles import get_profile
    from models.profiles.profile import prefill_pairs
    fleet = bench.FLEETS[0]
    assert bench.variant_profile(fleet, tmp_path) == fleet.profile  # no diagnostic: the shipped name
    shipped = get_profile(fleet.profile)
    flat = get_profile(bench.variant_profile(fleet, tmp_path, flat_decode=True))
    # decode: only the step's fixed cost (fixed_step_s) and the context at the datasheet bandwidth
    # (327,680 B a token over 8 x 2.039 TB/s), whatever the batch; prefill unchanged
    assert flat.step_time(0, 64, 0) == pytest.approx(shipped.fixed_step_s)
    assert flat.step_time(0, 1, 40_000) - flat.step_time(0, 1, 0) == pytest.approx(40_000 * 327_680 / (8 * 2.039e12))
    assert flat.step_time(2048, 0, 0, prefill_pairs(0, 2048)) == pytest.approx(
        shipped.step_time(2048, 0, 0, prefill_pairs(0, 2048)))
    half = get_profile(bench.variant_profile(fleet, tmp_path, prefill_scale=0.5))
    assert half.prefill_s_per_token == pytest.approx(shipped.prefill_s_per_token / 2)
    assert half.step_time(0, 8, 8000) == pytest.approx(shipped.step_time(0, 8, 8000))
    with pytest.raises(ValueError, match="prefill_scale must be > 0, got 0"):
        bench.variant_profile(fleet, tmp_path, prefill_scale=0.0)


def test_iteration_summary_of_two_hand_made_instance_logs(tmp_path: Path) -> None:
    head = ("name,tag,iteration_start,iteration_end,batch_size,prompt_tasks_in_batch,memory,pending_requests,"
            "pending_tasks,blocked_tasks,pending_prompts,earliest_request_id,memory_allocs_size,"
            "num_contiguous_iterations,batch_tokens,pending_tokens\n")
    m0, kv = 1e11, bench.PEER_KV_BYTES_PER_TOKEN
    a, b = tmp_path / "0.csv", tmp_path / "1.csv"
    a.write_text(head
                 # a 1000-token prompt with 2 decodes; 10 steps of the 2 decodes; a 3000-token prompt
                 # alone, 2 decodes preempted
                 + f"i0,None,0.0,0.2,3,1,{m0},0,0,0,0,0,2,1,1002,0\n"
                 + f"i0,None,0.2,0.5,2,0,{m0 + 500 * kv},0,0,0,0,0,2,10,2,0\n"
                 + f"i0,None,0.5,1.5,1,1,{m0 + 1000 * kv},0,0,2,0,0,2,1,3000,0\n")
    b.write_text(head + f"i1,None,0.0,0.1,4,0,{m0},0,0,0,0,0,2,2,4,0\n")  # 2 steps of 4 decodes
    s = bench.iteration_summary([a, b])
    assert s["prompt_iterations"] == 2 and s["prompt_only"] == 1 and s["whole_over_2048"] == 1
    assert s["prompt_time_share"] == pytest.approx(1.2 / 1.6)
    assert s["blocked_per_prompt_only"] == 2
    assert s["prompt_iter_p50_s"] == pytest.approx(0.6)  # of 0.2 and 1.0 s
    # decode-only steps weighted by tokens decoded: 20 tokens at 0.03 s (batch 2), 8 at 0.05 s (batch 4)
    assert s["decode_step_s"] == pytest.approx((20 * 0.03 + 8 * 0.05) / 28)
    assert s["decode_n"] == pytest.approx((20 * 2 + 8 * 4) / 28)
    assert s["kv_tokens_peak"] == pytest.approx(1000)
    b.write_text("name,iteration_start\n")
    with pytest.raises(ValueError, match=r"1\.csv: no column iteration_end"):
        bench.iteration_summary([a, b])


# --- the P/D comparison (--pd) ---

def test_the_prefill_end_metrics_count_from_the_prefill_end() -> None:
    # the three requests above, their prompts prefilled 0.5, 1 and 2.5 s after arrival
    lat = bench.Latencies(OURS.ttft_s, OURS.e2e_s, OURS.output_tokens, np.array([0.5, 1.0, 2.5]))
    assert lat.metric("TTFT-P").tolist() == [0.5, 1.0, 2.5]
    # (3 - 0.5) / (3 - 1) = 1.25 and (9 - 2.5) / (4 - 1) = 6.5 / 3; the one-token request has no gap
    assert lat.metric("TBT-P").tolist() == pytest.approx([1.25, 6.5 / 3])
    with pytest.raises(ValueError, match="TTFT-P needs the prefill-end times"):
        OURS.metric("TTFT-P")
    with pytest.raises(ValueError, match="prefilled_s has 2 values for 3 requests"):
        bench.Latencies(OURS.ttft_s, OURS.e2e_s, OURS.output_tokens, np.array([0.5, 1.0]))
    rows = bench.table({("conv", "pd"): lat}, {}, bench.METRICS + bench.PD_METRICS)
    assert [r[2] for r in rows[::2]] == ["TTFT", "TBT", "E2E", "TTFT-P", "TBT-P"]


def test_the_peers_ttft_is_its_prefill_end(tmp_path: Path) -> None:
    p = tmp_path / "0.csv"
    p.write_text("response_times,ttft_times,token_sizes\n2.5,0.5,5\n")
    lat = bench.read_peer(p)
    assert lat.metric("TTFT-P").tolist() == [0.5] and lat.metric("TBT-P").tolist() == [0.5]


def test_the_matched_link_reads_in_the_peers_transfer_time() -> None:
    from autoscaler.config.fleet import KVTransfer
    # SplitwiseSim: 1000 tokens x 2 x 8192 x 80 x 2 bytes over 200 GiB/s
    peer_s = 1000 * 2_621_440 / (200 * 2**30)
    assert peer_s == pytest.approx(0.01220703125)
    gbps = bench.matched_link_gbps(327_680)
    assert gbps == pytest.approx(200 * 1.073741824)  # an eighth of 200 GiB/s in Gb/s: 8 x fewer bytes
    assert KVTransfer(bandwidth_gbps=gbps, latency_s=0.0).seconds(1000, 327_680) == pytest.approx(peer_s)
    with pytest.raises(ValueError, match="kv_bytes_per_token must be > 0, got 0"):
        bench.matched_link_gbps(0)


def test_the_pd_fleet_file_has_the_pools_the_link_and_always_prefills_remotely(tmp_path: Path) -> None:
    from autoscaler.simulator.disagg import remote_prefill
    fleet = next(f for f in bench.PD_FLEETS if f.name == "Splitwise-HA-1P1T")
    svc = bench.pd_fleet_config(fleet, 100.0).services[0]
    assert svc.variants == [] and svc.roles is not None
    (p,), (d,) = svc.roles.prefill, svc.roles.decode
    assert (p.gpu, p.profile, p.min_replicas, p.max_replicas) == ("H100-SXM", "llama-2-70b/h100-sxm/tp8", 1, 1)
    assert (d.gpu, d.profile, d.min_replicas, d.max_replicas) == ("A100-80GB", "llama-2-70b/a100-80gb/tp8", 1, 1)
    assert p.gpus_per_replica == d.gpus_per_replica == 8
    assert svc.roles.kv_transfer.latency_s == 0.0
    assert svc.roles.kv_transfer.bandwidth_gbps == pytest.approx(214.7483648)
    assert svc.roles.non_cached_tokens == 1 and remote_prefill(1, 0, svc.roles.non_cached_tokens)
    aa = bench.PD_FLEETS[0]
    half = bench.variant_profile(aa.prefill, tmp_path, prefill_scale=0.5)
    cfg = bench.pd_fleet_config(aa, 100.0, prefill_profile=half).services[0].roles
    assert cfg is not None and cfg.prefill[0].profile == half and cfg.prefill[0].min_replicas == 2
    assert cfg.decode[0].profile == "llama-2-70b/a100-80gb/tp8" and cfg.decode[0].max_replicas == 1


def test_the_pd_peer_path_and_command_agree_on_its_output_dir() -> None:
    fleet = next(f for f in bench.PD_FLEETS if f.name == "Splitwise-AA-2P1T")
    assert bench.pd_peer_path(Path("results"), "azure_conv", fleet) == Path(
        "results/0/splitwise_2_1/azure_conv/3_0/llama2-70b/kv_jsq/detailed/0.csv")
    cmd = bench.pd_peer_command("azure_conv", fleet)
    for arg in ("cluster.servers.0.count=3", "cluster.servers.1.count=0", "start_state.prompt.num_instances=2",
                "start_state.token.num_instances=1", "applications.0.scheduler=kv_jsq",
                "start_state.split_type=homogeneous", "trace.filename=azure_conv"):
        assert arg in cmd


def test_split_roles_by_the_instance_logs_tag(tmp_path: Path) -> None:
    head = "name,tag,iteration_start\n"
    files = [tmp_path / f"{i}.csv" for i in range(3)]
    for f, tag in zip(files, ("prompt", "token", "prompt"), strict=True):
        f.write_text(head + f"x,{tag},0.0\nx,{tag},1.0\n")
    assert bench.split_roles(files) == {"prompt": [files[0], files[2]], "token": [files[1]]}
    files[1].write_text(head + "x,token,0.0\nx,prompt,1.0\n")
    with pytest.raises(ValueError, match=r"1\.csv: expected one tag, found \['prompt', 'token'\]"):
        bench.split_roles(files)
    files[1].write_text("name,iteration_start\n")
    with pytest.raises(ValueError, match=r"1\.csv: no column tag"):
        bench.split_roles(files)


def test_a_lone_request_prefills_as_on_an_aggregated_replica_then_reads_then_decodes() -> None:
    # one 1000-token prompt, 3 output tokens, on idle H100s: the P/D run's prefill end is the aggregated
    # replica's first token (the same prefill, alone), the user's first token comes after the read
    # (1000 x 2,621,440 B / 200 GiB/s = 12.2 ms, no fixed latency) and the decode replica's step
    wl = Workload([Request(0.0, 1000, 3)])
    pd = bench.run_ours_pd(wl, bench.PD_FLEETS[1])
    agg = bench.run_ours(wl, bench.FLEETS[1])
    assert pd.prefilled_s is not None
    assert pd.prefilled_s[0] == pytest.approx(agg.ttft_s[0])
    read = 1000 * 2_621_440 / (200 * 2**30)
    step = agg.metric("TBT")[0]  # one decode step of one sequence at ~1,000 tokens of context
    assert read + 0.5 * step < pd.ttft_s[0] - pd.prefilled_s[0] < read + 1.5 * step
    # then the same two decode steps as on the aggregated replica
    assert pd.e2e_s[0] - pd.ttft_s[0] == pytest.approx(agg.e2e_s[0] - agg.ttft_s[0], rel=0.02)


def test_fleets_are_chosen_within_the_mode() -> None:
    assert [f.name for f in bench.select_fleets(True, None)] == [f.name for f in bench.PD_FLEETS]
    assert bench.select_fleets(False, ["2xDGX-H100"]) == [bench.FLEETS[1]]
    with pytest.raises(ValueError, match="the P/D fleets are Splitwise-AA-2P1T, "):
        bench.select_fleets(True, ["3xDGX-A100"])
    assert bench.peer_file(Path("r"), "azure_code", bench.FLEETS[1]) == bench.peer_path(
        Path("r"), "azure_code", bench.FLEETS[1])


def test_out_of_order_counts_reversed_prefill_ends_per_instance_by_hand() -> None:
    # instance a: arrivals 0, 1, 3 end at 5, 3, 4 -> (0 -> 1) reversed, (1 -> 3) in order;
    # instance b: arrivals 2, 4 end together (one batch) -> in order. 1 of 3 pairs.
    where = ["a", "a", "b", "a", "b"]
    assert bench.out_of_order(where, [0.0, 1.0, 2.0, 3.0, 4.0], [5.0, 3.0, 7.0, 4.0, 7.0]) == (1, 3)
    # input order need not be arrival order: the same requests shuffled give the same count
    perm = [3, 0, 4, 1, 2]
    assert bench.out_of_order([where[i] for i in perm], [float(i) for i in perm],
                              [[5.0, 3.0, 7.0, 4.0, 7.0][i] for i in perm]) == (1, 3)
    # last in, first out on one instance: every pair reversed
    assert bench.out_of_order(["x"] * 4, [0.0, 1.0, 2.0, 3.0], [9.0, 8.0, 7.0, 6.0]) == (3, 3)
    with pytest.raises(ValueError, match="differ in length: 2, 1, 2"):
        bench.out_of_order(["a", "a"], [0.0], [1.0, 2.0])


def test_peer_prefill_order_reads_the_prompt_rows_of_request_nodes(tmp_path: Path) -> None:
    detailed = tmp_path / "detailed" / "0.csv"
    detailed.parent.mkdir()
    detailed.write_text("")
    # requests 0-2 on h100-80gb_0: prompts end at 3.0, 2.0, 4.0 (0 -> 1 reversed); request 3 alone on
    # another instance; the TOKEN rows (ending in reverse) are not prefills
    (tmp_path / "request_nodes.csv").write_text(
        "request_id,request_type,node_id,node_type,runner,start_timestamp,completion_timestamp\n"
        "0.0,2.0,0,PROMPT,h100-80gb_0,1.0,3.0\n0.0,2.0,1,TOKEN,h100-80gb_1,3.1,9.0\n"
        "1.0,2.0,0,PROMPT,h100-80gb_0,1.5,2.0\n1.0,2.0,1,TOKEN,h100-80gb_1,2.1,8.0\n"
        "2.0,2.0,0,PROMPT,h100-80gb_0,3.0,4.0\n2.0,2.0,1,TOKEN,h100-80gb_1,4.1,7.0\n"
        "3.0,2.0,0,PROMPT,a100-80gb_2,1.0,9.0\n")
    assert bench.peer_prefill_order(detailed) == (1, 2)
    (tmp_path / "request_nodes.csv").write_text("request_id,node_type,runner\n0.0,PROMPT,x\n")
    with pytest.raises(ValueError, match="no column completion_timestamp"):
        bench.peer_prefill_order(detailed)


def test_ours_prefills_a_queue_first_come_first_served() -> None:
    # six long prompts at once on the HH fleet's one prefill replica: each waits for those before it
    # (vLLM's FCFS waiting queue, chunked 2048 tokens a step), so no later one finishes first, whatever
    # the lengths: 0 of 5 pairs reversed
    wl = Workload([Request(0.001 * i, n, 2) for i, n in enumerate((8000, 500, 6000, 300, 4000, 100))])
    lat = bench.run_ours_pd(wl, bench.PD_FLEETS[1])
    assert lat.prefill_order == (0, 5)
