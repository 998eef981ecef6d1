"""Tests for autoscaler.config: loading the example fleet and one-line errors naming file and key."""

from __future__ import annotations

import copy
import csv
import json
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT

from autoscaler.config.loading import default_config, load_config, merged, moved_keys, parse_config
from autoscaler.errors import ConfigError
from models.profiles import get_profile, list_profiles, shipped_entries

EXAMPLE = ROOT / "examples" / "fleet.yaml"


def example_doc() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def write(tmp_path: Path, doc: object, name: str = "fleet.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert "\n" not in msg, "error must be one line"
    assert msg.startswith(f"{path}:"), f"error must start with the file name: {msg}"
    return msg


def variant_named(doc: dict, name: str) -> dict:
    return next(v for v in doc["services"][0]["variants"] if v["name"] == name)


def test_example_fleet_loads() -> None:
    cfg = load_config(EXAMPLE)
    svc = cfg.service()
    assert svc.name == "llama-3.1-8b"
    assert [v.name for v in svc.variants] == ["h100", "a100", "gh200"]
    gh = svc.variants[2]
    assert (gh.quota, gh.cap, gh.min_replicas, gh.start_replicas) == (4, 4, 1, 2)
    assert svc.variants[0].start_replicas == 1 and svc.variants[1].start_replicas == 0
    assert cfg.controller.tick_s == 15 and cfg.controller.guard.max_step_down == 2
    assert cfg.engine.max_num_batched_tokens == 8192
    assert svc.slo["batch"].ttft_s == 20.0


def test_example_prices_match_published_catalog(data_dir) -> None:
    # examples/fleet.yaml cites Lambda on-demand $/GPU-hour from the SkyPilot catalog in shared/data.
    rows = list(csv.DictReader((data_dir / "gpu-prices" / "lambda_ondemand_prices_skypilot_catalog_v7.csv").open()))
    per_gpu = {r["InstanceType"]: float(r["PriceUSDPerGPUHour"]) for r in rows if r["PriceUSDPerGPUHour"]}
    svc = load_config(EXAMPLE).service()
    prices = {v.name: v.price_per_gpu_hour for v in svc.variants}
    assert prices == {"h100": per_gpu["gpu_8x_h100_sxm5"], "a100": per_gpu["gpu_8x_a100_80gb_sxm4"],
                      "gh200": per_gpu["gpu_1x_gh200"]}


def test_embedded_default_is_the_example_byte_for_byte() -> None:
    assert (ROOT / "autoscaler" / "default_fleet.yaml").read_bytes() == EXAMPLE.read_bytes()
    assert default_config() == load_config(EXAMPLE)


def test_missing_services(tmp_path: Path) -> None:
    doc = example_doc()
    del doc["services"]
    msg = load_error(write(tmp_path, doc))
    assert "services" in msg and "required" in msg.lower()


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    assert "services" in load_error(p)


def test_unknown_key(tmp_path: Path) -> None:
    doc = example_doc()
    variant_named(doc, "a100")["max_replica"] = 3
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].variants[a100].max_replica" in msg
    assert "not permitted" in msg


def test_unknown_top_level_key(tmp_path: Path) -> None:
    doc = example_doc()
    doc["controler"] = {}
    assert "controler" in load_error(write(tmp_path, doc))


def test_negative_price(tmp_path: Path) -> None:
    doc = example_doc()
    variant_named(doc, "h100")["price_per_gpu_hour"] = -1.0
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].variants[h100].price_per_gpu_hour" in msg
    assert "greater than or equal to 0" in msg


def test_unknown_profile_lists_known(tmp_path: Path) -> None:
    doc = example_doc()
    variant_named(doc, "gh200")["profile"] = "llama-3-8b/b200"
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].variants[gh200].profile" in msg
    assert "llama-3-8b/b200" in msg
    known = list_profiles()
    # Every shipped profile (read straight from the package's coefficients.json) is listed.
    shipped = json.loads(resources.files("models.profiles").joinpath("coefficients.json").read_text())["profiles"]
    assert known == sorted(shipped) and len(known) > 3
    assert msg.endswith(f"known: {', '.join(known)}, or a profile file (*.json)")


def _profile_file(path: Path, **coefficients: float) -> Path:
    entry = shipped_entries()["llama-3-8b/gh200"]
    path.write_text(json.dumps({**entry, "coefficients": {**entry["coefficients"], **coefficients}}))
    return path


def test_profile_file_relative_to_the_fleet_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ./profiles/mine.json resolves against the fleet file's directory, not the working directory.
    (tmp_path / "fleet" / "profiles").mkdir(parents=True)
    _profile_file(tmp_path / "fleet" / "profiles" / "mine.json", step_overhead_s=0.02)
    doc = example_doc()
    variant_named(doc, "gh200")["profile"] = "./profiles/mine.json"
    fleet = write(tmp_path / "fleet", doc)
    monkeypatch.chdir(tmp_path)
    gh200 = variant_named(load_config(fleet).model_dump(), "gh200")
    assert gh200["profile"] == str(tmp_path / "fleet" / "profiles" / "mine.json")
    assert get_profile(gh200["profile"]).step_overhead_s == 0.02
    assert get_profile(gh200["profile"]).step_overhead_s != get_profile("llama-3-8b/gh200").step_overhead_s


def test_bad_profile_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = _profile_file(tmp_path / "bad.json", bandwidth_efficiency=0.0)
    doc = example_doc()
    variant_named(doc, "gh200")["profile"] = "bad.json"
    msg = load_error(write(tmp_path, doc))
    assert msg == (f"{tmp_path / 'fleet.yaml'}: services[llama-3.1-8b].variants[gh200].profile: {bad}: "
                   "coefficients.bandwidth_efficiency: Input should be greater than 0")
    variant_named(doc, "gh200")["profile"] = "absent.json"
    msg = load_error(write(tmp_path, doc))
    assert f"variants[gh200].profile: {tmp_path / 'absent.json'}: cannot read profile file" in msg


def test_min_replicas_above_quota(tmp_path: Path) -> None:
    doc = example_doc()
    variant_named(doc, "gh200")["min_replicas"] = 5  # quota 4
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].variants[gh200]" in msg
    assert "min_replicas (5)" in msg and "(4)" in msg


def test_missing_batch_slo_class(tmp_path: Path) -> None:
    doc = example_doc()
    del doc["services"][0]["slo"]["batch"]
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].slo" in msg
    assert "batch" in msg


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    # line 3 has a second "key:" inside a plain scalar, which YAML forbids
    p.write_text("services:\n  - name: x\n    model: a: b\n    max_model_len: 5\n")
    msg = load_error(p)
    assert "line 3" in msg
    assert "YAML" in msg


def test_missing_file(tmp_path: Path) -> None:
    msg = load_error(tmp_path / "nope.yaml")
    assert "cannot read" in msg


def test_duplicate_variant_names(tmp_path: Path) -> None:
    doc = example_doc()
    doc["services"][0]["variants"].append(copy.deepcopy(variant_named(doc, "h100")))
    msg = load_error(write(tmp_path, doc))
    assert "duplicate variant" in msg and "h100" in msg


def test_parse_config_source_label() -> None:
    with pytest.raises(ConfigError, match=r"^<mine>: services: "):
        parse_config({"services": []}, "<mine>")


def test_max_model_len_must_fit_in_kv_cache(tmp_path) -> None:
    # vLLM refuses to start when one max_model_len sequence cannot fit in the KV cache; the simulator
    # keeps one 16-token block of slack per sequence, so 400000 - 16 = 399984 is the largest that fits.
    doc = yaml.safe_load(EXAMPLE.read_text())
    path = tmp_path / "fleet.yaml"
    doc["services"][0]["max_model_len"] = 399_984
    path.write_text(yaml.safe_dump(doc))
    load_config(path)
    doc["services"][0]["max_model_len"] = 399_985
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: services[llama-3.1-8b].variants[h100].kv_cache_tokens (400000) cannot hold")
    assert "max_model_len (399985)" in msg


def test_service_that_can_never_serve_is_rejected(tmp_path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    for v in doc["services"][0]["variants"]:
        v["min_replicas"] = v["max_replicas"] = v["initial_replicas"] = 0
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"services\[llama-3.1-8b\]: every variant has max_replicas"):
        load_config(path)


@pytest.mark.parametrize("key, value", [("price_per_gpu_hour", float("inf")), ("startup_cold_s", float("nan"))])
def test_non_finite_numbers_are_rejected(tmp_path, key: str, value: float) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["services"][0]["variants"][0][key] = value
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=rf"services\[llama-3.1-8b\]\.variants\[h100\]\.{key}: .*finite"):
        load_config(path)


def test_window_shorter_than_tick_is_rejected(tmp_path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["controller"]["window_s"] = 10
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"controller: window_s \(10\.0\) is shorter than tick_s \(15\.0\)"):
        load_config(path)


def test_non_utf8_fleet_file(tmp_path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(b"services: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"fleet.yaml: not a UTF-8 text file"):
        load_config(path)


def test_crash_of_unknown_variant_names_the_key(tmp_path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["simulator"]["crashes"] = [{"time_s": 60, "variant": "h100"}, {"time_s": 90, "variant": "h200"}]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and "simulator.crashes[1].variant" in msg and "'h200'" in msg
    assert "a100, gh200, h100" in msg


def test_itl_objective_below_fixed_step_time_is_rejected(tmp_path) -> None:
    # The A100 profile's fixed step cost (weights read + overhead) is ~14 ms (models/profiles):
    # a 1 ms ITL objective can never be met.
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["services"][0]["slo"]["interactive"]["itl_s"] = 0.001
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    key = r"services\[llama-3.1-8b\]\.slo\.interactive\.itl_s"
    with pytest.raises(ConfigError, match=key + r": 0\.001 s is at or below"):
        load_config(path)


def test_duplicate_key_names_its_line(tmp_path) -> None:
    # PyYAML alone keeps the last of two equal keys: the first price would be lost without a word.
    text = EXAMPLE.read_text().replace(
        "    price_per_gpu_hour: 2.99\n", "    price_per_gpu_hour: 2.99\n        price_per_gpu_hour: 0.5\n", 1
    )
    dup_line = text.splitlines().index("        price_per_gpu_hour: 0.5") + 1
    p = tmp_path / "fleet.yaml"
    p.write_text(text)
    msg = load_error(p)
    assert f"line {dup_line}" in msg and "duplicate key 'price_per_gpu_hour'" in msg


@pytest.mark.parametrize(("key", "value"), [("max_replicas", True), ("price_per_gpu_hour", False),
                                            ("startup_cold_s", True)])
def test_boolean_where_a_number_is_expected_is_rejected(tmp_path, key: str, value: bool) -> None:
    # pydantic's lax mode would read true as 1 and false as 0.
    doc = example_doc()
    variant_named(doc, "h100")[key] = value
    msg = load_error(write(tmp_path, doc))
    assert f"services[llama-3.1-8b].variants[h100].{key}:" in msg and "boolean" in msg


def test_boolean_fields_still_take_booleans(tmp_path) -> None:
    doc = example_doc()
    doc["controller"]["pid"]["scale_with_replicas"] = False
    assert load_config(write(tmp_path, doc)).controller.pid.scale_with_replicas is False


def test_merge_keys_still_work_and_may_be_overridden(tmp_path) -> None:
    # The a100 variant merges the h100's settings (<<: *h100), drops its own warm_nodes line so the
    # h100's (3) comes through, and keeps its other keys, which override the merged ones.
    text = EXAMPLE.read_text()
    h100, a100 = text.index("      - name: h100\n"), text.index("      - name: a100\n")
    gh200 = text.index("      - name: gh200\n")
    block_h = text[h100:a100].replace("      - name: h100\n", "      - &h100\n        name: h100\n")
    block_h = block_h.replace("warm_nodes: 4", "warm_nodes: 3")
    block_a = text[a100:gh200].replace("      - name: a100\n", "      - <<: *h100\n        name: a100\n")
    block_a = block_a.replace("        warm_nodes: 4\n", "")
    p = tmp_path / "fleet.yaml"
    p.write_text(text[:h100] + block_h + block_a + text[gh200:])
    a100 = next(v for v in load_config(p).services[0].variants if v.name == "a100")
    assert a100.warm_nodes == 3  # from the merge
    assert a100.gpu == "A100-80GB" and a100.price_per_gpu_hour == 1.79  # its own keys win


@pytest.mark.parametrize(("tail", "expect"), [
    ("? [a, b]\n: 1\n", "unhashable key"),
    ("extra: !!int abc\n", "invalid YAML value"),
    ("extra: 2024-13-45\n", "invalid YAML value"),
    ("extra: \x00\n", "invalid YAML"),
])
def test_yaml_that_pyyaml_cannot_build_is_a_one_line_error(tmp_path, tail: str, expect: str) -> None:
    p = tmp_path / "fleet.yaml"
    p.write_text(EXAMPLE.read_text() + tail)
    msg = load_error(p)
    assert expect in msg and "::" not in msg


def test_integer_too_large_for_float_arithmetic_is_rejected(tmp_path) -> None:
    doc = example_doc()
    variant_named(doc, "h100")["max_replicas"] = 10**400
    msg = load_error(write(tmp_path, doc))
    assert "services[llama-3.1-8b].variants[h100].max_replicas:" in msg and "too large" in msg


@pytest.mark.parametrize("value", [1, 0, "yes", "true"])
def test_boolean_fields_take_only_booleans(tmp_path, value) -> None:
    doc = example_doc()
    doc["controller"]["pid"]["scale_with_replicas"] = value
    msg = load_error(write(tmp_path, doc))
    assert "controller.pid.scale_with_replicas:" in msg and "boolean" in msg


@pytest.mark.parametrize(("where", "key", "value", "message"), [
    ("pid", "deadband", 1.0, r"controller\.pid\.deadband: Input should be less than 1"),
    ("pid", "error_clip", 0.2, r"controller\.pid: deadband \(0\.25\) must be below error_clip \(0\.2\)"),
    ("controller", "window_s", 1e9, r"controller\.window_s: Input should be less than or equal to 86400"),
])
def test_settings_that_switch_control_off_are_rejected(tmp_path, where: str, key: str, value: float,
                                                       message: str) -> None:
    # A deadband >= 1 never lets a (clipped at -1) negative error out; one >= error_clip never a positive one;
    # a window of years keeps the loop warming up forever.
    doc = yaml.safe_load(EXAMPLE.read_text())
    (doc["controller"]["pid"] if where == "pid" else doc["controller"])[key] = value
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


# ------------------------------------------------------------------------------------ what vLLM or Kubernetes refuse
@pytest.mark.parametrize(("edit", "key", "needle"), [
    (lambda d: variant_named(d, "h100").update(gpu="A100-80GB"), "variants[h100].gpu",
     "'A100-80GB', but profile 'llama-3-8b/h100-sxm' was measured on H100-SXM"),
    (lambda d: variant_named(d, "h100").update(gpus_per_replica=4), "variants[h100].gpus_per_replica",
     "4, but profile 'llama-3-8b/h100-sxm' describes a replica of 1 GPUs (tensor parallel)"),
    (lambda d: variant_named(d, "h100").update(gpus_per_replica=2, profile="llama-3-8b/h100-sxm/tp4"),
     "variants[h100].gpus_per_replica", "2, but profile 'llama-3-8b/h100-sxm/tp4' describes a replica of 4 GPUs"),
    (lambda d: variant_named(d, "h100").update(gpu="TPU-v5"), "variants[h100].gpu",
     "unknown GPU 'TPU-v5'; known: A100-40GB, A100-80GB, GH200, H100-SXM"),
    (lambda d: variant_named(d, "gh200").update(initial_replicas=9), "variants[gh200]",
     "initial_replicas (9) exceeds max_replicas/quota (4)"),
    (lambda d: variant_named(d, "h100").update(price_per_gpu_hour="2.99"), "variants[h100].price_per_gpu_hour",
     "a number is expected, got the string '2.99' (write it without quotes)"),
    (lambda d: variant_named(d, "h100").update(max_replicas="40"), "variants[h100].max_replicas",
     "a number is expected, got the string '40'"),
    # PyYAML (YAML 1.1) loads an unquoted 1e-3 as text: the message says so instead of "quotes"
    (lambda d: variant_named(d, "h100").update(price_per_gpu_hour="3e0"), "variants[h100].price_per_gpu_hour",
     "'3e0': YAML reads an exponent without a decimal point as text (write 1.0e-3, or 0.001)"),
    (lambda d: d["engine"].update(max_num_seqs=512, max_num_batched_tokens=256), "engine",
     "max_num_batched_tokens (256) must be >= max_num_seqs (512)"),
    (lambda d: variant_named(d, "h100").update(name='h"100'), "variants[h\"100].name",
     "variant name 'h\"100' is not a Kubernetes DNS label"),
    (lambda d: variant_named(d, "h100").update(name=""), "variants[0].name", "variant name '' is not"),
    (lambda d: variant_named(d, "h100").update(name="H100"), "variants[H100].name", "not a Kubernetes DNS label"),
    (lambda d: d["services"][0].update(name="llama 3"), "services[llama 3].name",
     "service name 'llama 3' is not a Kubernetes DNS subdomain"),
    (lambda d: d["services"][0].update(name="x" * 250), "services[" + "x" * 250 + "]",
     "Deployment name"),
])
def test_values_vllm_or_kubernetes_would_refuse_are_errors_naming_the_key(tmp_path: Path, edit, key: str,
                                                                          needle: str) -> None:
    doc = example_doc()
    edit(doc)
    msg = load_error(write(tmp_path, doc))
    assert key in msg and needle in msg, msg


def test_a_name_with_a_newline_never_reaches_a_query() -> None:
    # Refused as a name; a model name (free text) is escaped in PromQL instead.
    from autoscaler.promql import quote

    doc = example_doc()
    variant_named(doc, "h100")["name"] = "h100\nx"
    with pytest.raises(ConfigError, match="not a Kubernetes DNS label"):
        parse_config(doc, "fleet.yaml")
    assert quote('m"\n\\') == '"m\\"\\n\\\\"'


def test_engine_under_simulator_still_loads_with_a_warning() -> None:
    """``simulator.engine`` (the engine limits' place before they moved to the top level) is read
    into ``engine`` with a FutureWarning; giving both is refused rather than picking one."""
    doc = yaml.safe_load((ROOT / "autoscaler" / "default_fleet.yaml").read_text())
    limits = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 32}
    old = {**doc, "simulator": {**doc["simulator"], "engine": limits}}
    del old["engine"]
    with pytest.warns(FutureWarning, match=r"simulator\.engine is now engine"):
        cfg = parse_config(old, "old.yaml")
    assert (cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens, cfg.engine.block_size) == (64, 2048, 32)
    both = {**old, "engine": limits}
    with pytest.raises(ConfigError, match=r"simulator\.engine and engine both given"):
        parse_config(both, "both.yaml")
    bad = {**old, "simulator": {**old["simulator"], "engine": {**limits, "max_num_seqs": True}}}
    with pytest.raises(ConfigError, match=r"^bad\.yaml: simulator\.engine\.max_num_seqs: the boolean true"), \
            pytest.warns(FutureWarning):
        parse_config(bad, "bad.yaml")  # the error names the key where the file has it


def test_a_patch_in_the_old_place_overrides_the_base() -> None:
    """A scenario's fleet patch written with simulator.engine, laid over a base that has engine: the
    patch's limits win (moved before merging), not a 'both given' error."""
    base = yaml.safe_load((ROOT / "autoscaler" / "default_fleet.yaml").read_text())
    patch = {"simulator": {"engine": {"max_num_batched_tokens": 2048}}}
    with pytest.warns(FutureWarning, match=r"^scenario x: simulator\.engine is now engine"):
        doc = merged(base, moved_keys(patch, "scenario x"))
    cfg = parse_config(doc, "scenario x")
    assert (cfg.engine.max_num_batched_tokens, cfg.engine.max_num_seqs) == (2048, 256)  # 256: the base's


@pytest.mark.parametrize(("workloads", "kind_name"), [
    ({"h100": {"kind": "LeaderWorkerSet", "name": "same"}, "a100": {"kind": "LeaderWorkerSet", "name": "same"}},
     "LeaderWorkerSet 'same'"),
    ({"h100": {"name": "{svc}-a100"}}, "Deployment '{svc}-a100'"),  # an explicit name equal to another's default
])
def test_two_variants_never_scale_one_workload(workloads: dict[str, dict[str, str]], kind_name: str) -> None:
    """Two variants on one object would undo each other's writes every tick: refused, naming both."""
    doc = yaml.safe_load((ROOT / "autoscaler" / "default_fleet.yaml").read_text())
    svc = doc["services"][0]["name"]
    doc["kubernetes"] = {"workloads": {svc: {v: {k: x.format(svc=svc) for k, x in w.items()}
                                             for v, w in workloads.items()}}}
    with pytest.raises(ConfigError, match=re.escape(f"both scale {kind_name.format(svc=svc)}")):
        parse_config(doc, "fleet.yaml")
    doc["kubernetes"]["workloads"][svc]["h100"]["kind"] = "StatefulSet"  # another kind: another object
    parse_config(doc, "fleet.yaml")


def test_only_a_bounded_regular_file_is_read_as_a_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device never ends and a FIFO blocks: refused before reading (issue 31, item 12); a file
    beyond the size bound is refused after reading no more than it."""
    import os

    import autoscaler.config.loading as loading

    fifo = tmp_path / "fleet.fifo"
    os.mkfifo(fifo)
    for path, why in ((Path("/dev/zero"), "is not a regular file"), (fifo, "is not a regular file"),
                      (tmp_path, "is a directory")):
        with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: cannot read fleet file: {why}"):
            load_config(path)
    big = tmp_path / "big.yaml"
    big.write_text("services: []\n" + "#" * 2048)
    monkeypatch.setattr(loading, "MAX_FLEET_BYTES", 2**20 // 1024)  # 1 KiB
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)


def test_the_pd_saturation_filter_without_pools_is_refused(tmp_path: Path) -> None:
    # The filter is read only by the P/D router: on examples/fleet.yaml (no roles) it was accepted and every
    # arrival routed as with it off. On a fleet with pools it loads (examples/fleet-mixed-pd.yaml sets it).
    doc = example_doc()
    doc.setdefault("simulator", {})["pd_saturation_filter"] = True
    path = write(tmp_path, doc)
    assert load_error(path) == (f"{path}: simulator.pd_saturation_filter: no service has prefill/decode roles, so "
                                "no prefill pool to be saturated (set roles on a service, or leave the filter off)")
    doc["simulator"]["pd_saturation_filter"] = False
    assert load_config(write(tmp_path, doc)).simulator.pd_saturation_filter is False
    mixed = load_config(ROOT / "examples" / "fleet-mixed-pd.yaml")
    assert mixed.simulator.pd_saturation_filter is True


def test_prefill_priority_without_pools_is_refused(tmp_path: Path) -> None:
    # Only prefill replicas' queues are ordered by it (disagg.enqueue): on examples/fleet.yaml (no roles)
    # it would be read by nothing. On a fleet with pools it loads.
    doc = example_doc()
    doc.setdefault("simulator", {})["prefill_priority"] = True
    path = write(tmp_path, doc)
    assert load_error(path) == (f"{path}: simulator.prefill_priority: no service has prefill/decode roles, so no "
                                "prefill queue to order (set roles on a service, or leave it off)")
    pools = yaml.safe_load((ROOT / "examples" / "fleet-pd.yaml").read_text())
    pools.setdefault("simulator", {})["prefill_priority"] = True
    assert load_config(write(tmp_path, pools)).simulator.prefill_priority is True


@pytest.mark.parametrize("value", [1, 0, "yes", "true"])
@pytest.mark.parametrize(("section", "key"), [("simulator", "pd_saturation_filter"), ("simulator", "prefill_priority"),
                                              ("kubernetes", "pod_deletion_cost"), ("kubernetes", "watch")])
def test_the_other_boolean_fields_take_only_booleans_too(tmp_path, section: str, key: str, value: object) -> None:
    # As test_boolean_fields_take_only_booleans: these three were plain bool, so pydantic's lax mode read
    # "yes", "true" and 1 as True and 0 as False, a quoted or numbered value loading as a switch
    doc = yaml.safe_load((ROOT / "examples" / "fleet-pd.yaml").read_text())  # pools: the filter can be on
    doc.setdefault(section, {})[key] = value
    msg = load_error(write(tmp_path, doc))
    assert msg.endswith(f"{section}.{key}: Input should be a valid boolean")
    doc[section][key] = True
    assert getattr(getattr(load_config(write(tmp_path, doc)), section), key) is True
