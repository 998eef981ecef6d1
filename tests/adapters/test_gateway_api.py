"""The admission thresholds as the Gateway API Inference Extension's InferenceObjectives
(autoscaler.adapters.gateway_api, ``autoscaler admission objectives``, examples/gateway)."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from support.paths import ROOT
from typer.testing import CliRunner

from autoscaler.adapters.gateway_api import epp_config, objective_priority, objectives, read_document
from autoscaler.cli import app
from autoscaler.config.loading import default_config
from autoscaler.errors import UnreachableError
from autoscaler.loop.admission import AdmissionDocument
from autoscaler.loop.export import serve
from controllers.admission import concurrency_budget, token_budget


def test_priorities_keep_their_rank_until_a_threshold_of_zero_sheds_them() -> None:
    # ranks: sheddable 0, standard 1, critical 2; a threshold of 0 drops a priority by 3, below every rank
    assert [objective_priority(p, None) for p in ("sheddable", "standard", "critical")] == [0, 1, 2]
    assert [objective_priority(p, 1.5) for p in ("sheddable", "standard", "critical")] == [0, 1, 2]
    assert [objective_priority(p, 0.0) for p in ("sheddable", "standard", "critical")] == [-3, -2, -1]
    with pytest.raises(ValueError, match="unknown priority 'gold'"):
        objective_priority("gold", None)


def test_one_objective_per_service_and_priority_on_its_pool() -> None:
    out = objectives({"chat": {"sheddable": 0.0, "standard": 2.0}, "code": {}}, namespace="llm")
    assert [m["metadata"]["name"] for m in out] == [
        "chat-critical", "chat-standard", "chat-sheddable", "code-critical", "code-standard", "code-sheddable"]
    assert [m["spec"]["priority"] for m in out] == [2, 1, -3, 2, 1, 0]
    assert {m["spec"]["poolRef"]["name"] for m in out[:3]} == {"chat"}
    assert all(m["apiVersion"] == "llm-d.ai/v1alpha2" and m["kind"] == "InferenceObjective"
               and m["metadata"]["namespace"] == "llm" for m in out)
    old = objectives({"chat": {}}, api_group="inference.networking.x-k8s.io")
    assert {m["apiVersion"] for m in old} == {"inference.networking.x-k8s.io/v1alpha2"}
    assert [m["spec"] for m in old] == [m["spec"] for m in objectives({"chat": {}})]
    with pytest.raises(ValueError, match=r"--api-group 'inference\.networking\.k8s\.io' is not one an EPP serves"):
        objectives({"chat": {}}, api_group="inference.networking.k8s.io")
    assert {m["spec"]["poolRef"]["name"] for m in objectives({"chat": {}}, pool="pool-a")} == {"pool-a"}
    with pytest.raises(ValueError, match="'Chat_1-critical' is not a valid Kubernetes object name"):
        objectives({"Chat_1": {}})


def test_continuation_objectives_keep_their_class_rank_whatever_its_threshold() -> None:
    # chat: critical open, standard 2 s, sheddable 0 (shed: -3); each followed by its continuation,
    # which keeps the class's rank (2, 1, 0): never negative, so llm-d-router v0.10.0's admitter passes it
    out = objectives({"chat": {"sheddable": 0.0, "standard": 2.0}}, namespace="llm", continuations=True)
    assert [(m["metadata"]["name"], m["spec"]["priority"]) for m in out] == [
        ("chat-critical", 2), ("chat-critical-continuing", 2), ("chat-standard", 1),
        ("chat-standard-continuing", 1), ("chat-sheddable", -3), ("chat-sheddable-continuing", 0)]
    assert [m["metadata"]["labels"].get("autoscaler/continuation") for m in out] == [None, "true"] * 3
    assert [m["metadata"]["annotations"]["autoscaler/admission-threshold-seconds"] for m in out] == [
        "none", "none", "2", "none", "0", "none"]
    # off (the default), the manifests are exactly the ones without the option
    assert objectives({"chat": {"sheddable": 0.0}}) == [m for m in objectives({"chat": {"sheddable": 0.0}},
                                                                                continuations=True)
                                                         if "autoscaler/continuation" not in m["metadata"]["labels"]]
    # every priority a continuation objective takes has a band in the EPP config admission budget writes
    bands = {b["priority"] for b in epp_config(8)["flowControl"]["priorityBands"]}
    assert {m["spec"]["priority"] for m in out} <= bands


def test_a_threshold_of_minus_zero_is_written_0_and_sheds_as_0() -> None:
    # -0.0 passes a document's check (-0.0 >= 0) and JSON may carry it; f"{-0.0:g}" is "-0"
    (shed,) = [m for m in objectives({"chat": {"sheddable": -0.0}}) if m["metadata"]["name"] == "chat-sheddable"]
    assert shed["metadata"]["annotations"]["autoscaler/admission-threshold-seconds"] == "0"
    assert shed["spec"]["priority"] == -3  # the same objective as a threshold of 0


def test_the_cli_writes_continuation_objectives_on_request(tmp_path: Path) -> None:
    doc = AdmissionDocument()
    doc.publish("chat", {"critical": None, "standard": None, "sheddable": 0.0})
    path = tmp_path / "admission.json"
    path.write_bytes(doc.json())
    res = CliRunner().invoke(app, ["admission", "objectives", str(path), "--continuations"])
    assert res.exit_code == 0, res.output
    by_name = {m["metadata"]["name"]: m["spec"]["priority"] for m in yaml.safe_load_all(res.output)}
    assert by_name == {"chat-critical": 2, "chat-critical-continuing": 2, "chat-standard": 1,
                       "chat-standard-continuing": 1, "chat-sheddable": -3, "chat-sheddable-continuing": 0}


# What ``admission objectives --pool pool-a --namespace llm --continuations`` prints for service chat
# under critical no limit, standard 0, sheddable 2.5 s, written by hand from the module docstring:
# critical 2 / 2, standard 2 - 3 = -2 / continuing 1, sheddable 0 / 0; each continuation right after
# its class's objective, labelled autoscaler/continuation and annotated "none" (no threshold binds it).
CHAT_CONTINUATIONS_YAML = """\
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-critical
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: critical
  annotations:
    autoscaler/admission-threshold-seconds: none
spec:
  priority: 2
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-critical-continuing
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: critical
    autoscaler/continuation: 'true'
  annotations:
    autoscaler/admission-threshold-seconds: none
spec:
  priority: 2
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-standard
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: standard
  annotations:
    autoscaler/admission-threshold-seconds: '0'
spec:
  priority: -2
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-standard-continuing
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: standard
    autoscaler/continuation: 'true'
  annotations:
    autoscaler/admission-threshold-seconds: none
spec:
  priority: 1
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-sheddable
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: sheddable
  annotations:
    autoscaler/admission-threshold-seconds: '2.5'
spec:
  priority: 0
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
---
apiVersion: llm-d.ai/v1alpha2
kind: InferenceObjective
metadata:
  name: chat-sheddable-continuing
  namespace: llm
  labels:
    app.kubernetes.io/managed-by: autoscaler
    autoscaler/service: chat
    autoscaler/priority: sheddable
    autoscaler/continuation: 'true'
  annotations:
    autoscaler/admission-threshold-seconds: none
spec:
  priority: 0
  poolRef:
    group: inference.networking.k8s.io
    kind: InferencePool
    name: pool-a
"""


def test_the_cli_prints_the_hand_written_manifests_with_and_without_continuations(tmp_path: Path) -> None:
    doc = AdmissionDocument()
    doc.publish("chat", {"critical": None, "standard": 0.0, "sheddable": 2.5})
    path = tmp_path / "admission.json"
    path.write_bytes(doc.json())
    args = ["admission", "objectives", str(path), "--pool", "pool-a", "--namespace", "llm"]
    on = CliRunner().invoke(app, [*args, "--continuations"])
    assert on.exit_code == 0, on.output
    assert on.output == CHAT_CONTINUATIONS_YAML
    # off (the default or --no-continuations): the same text without the three continuation documents
    without = "---\n".join(d for d in CHAT_CONTINUATIONS_YAML.split("---\n") if "-continuing\n" not in d)
    for off_args in (args, [*args, "--no-continuations"]):
        off = CliRunner().invoke(app, off_args)
        assert off.exit_code == 0, off.output
        assert off.output == without


# llm-d-router v0.10.0 (pkg/epp/requestcontrol/admission.go, flowcontrol FlowKey): flow control dispatches
# bands highest priority first. The simulated gateway's order (gateway.py, docs/admission.md): classes
# highest first, within a class continuing before new. Keys: (class rank, continuing).
SIMULATOR_ORDER = [(2, True), (2, False), (1, True), (1, False), (0, True), (0, False)]


@pytest.mark.parametrize("limits", list(itertools.product((None, 0.0, 1.5), repeat=3)),
                         ids=lambda t: "-".join("none" if x is None else f"{x:g}" for x in t))
def test_continuation_priorities_are_never_negative_and_keep_the_simulators_order(
        limits: tuple[float | None, float | None, float | None]) -> None:
    """Under every mix of thresholds (no limit, 0, a budget per class): each continuation objective has
    its class's rank (critical 2, standard 1, sheddable 0, whatever the threshold), so the admitter
    passes it; it is never below its class's new requests; and wherever the simulator dispatches X
    before Y the EPP's band of X is at least Y's, except a class being shed (threshold 0) whose new
    requests drop below every continuation (docs/admission.md)."""
    thresholds = dict(zip(("critical", "standard", "sheddable"), limits, strict=True))
    out = objectives({"chat": thresholds}, continuations=True)
    rank = {"critical": 2, "standard": 1, "sheddable": 0}
    prio = {(rank[m["metadata"]["labels"]["autoscaler/priority"]],
             "autoscaler/continuation" in m["metadata"]["labels"]): m["spec"]["priority"] for m in out}
    assert [prio[(r, True)] for r in (2, 1, 0)] == [2, 1, 0]
    assert all(prio[(r, True)] >= prio[(r, False)] for r in (2, 1, 0))
    shed = {rank[p] for p, t in thresholds.items() if t == 0}
    for i, x in enumerate(SIMULATOR_ORDER):
        for y in SIMULATOR_ORDER[i + 1:]:
            if x[1] or x[0] not in shed:
                assert prio[x] >= prio[y], (x, y, prio)
            else:  # a shed class's new requests: below every continuation, above nothing open
                assert prio[x] < min(prio[(r, True)] for r in (2, 1, 0))
    bands = {b["priority"] for b in epp_config(8)["flowControl"]["priorityBands"]}
    shipped = {b["priority"] for b in yaml.safe_load((ROOT / "examples" / "gateway" / "epp-config.yaml").read_text())
               ["flowControl"]["priorityBands"]}
    assert set(prio.values()) <= bands and set(prio.values()) <= shipped


def test_the_cli_reads_the_served_document_and_prints_objectives() -> None:
    doc = AdmissionDocument()
    doc.publish("llama-3.1-8b", {"critical": None, "standard": 1.0, "sheddable": 0.0})
    server = serve(CollectorRegistry(), "127.0.0.1:0", {"/v1/admission": doc.json})
    try:
        res = CliRunner().invoke(app, ["admission", "objectives", f"http://127.0.0.1:{server.port}",
                                       "--namespace", "llm"])
    finally:
        server.close()
    assert res.exit_code == 0, res.output
    docs = list(yaml.safe_load_all(res.output))
    by_name = {m["metadata"]["name"]: m["spec"]["priority"] for m in docs}
    assert by_name == {"llama-3.1-8b-critical": 2, "llama-3.1-8b-standard": 1, "llama-3.1-8b-sheddable": -3}
    # the threshold behind each priority, for the people reading the objectives
    assert [m["metadata"]["annotations"]["autoscaler/admission-threshold-seconds"] for m in docs] == ["none", "1", "0"]


# llm-d-router v0.10.0 config/crd/bases/llm-d.ai_inferenceobjectives.yaml, version v1alpha2: the
# constraints of its openAPIV3Schema (the API server prunes fields it does not list, so extra fields are
# not an error; these are what it refuses).
INFERENCE_OBJECTIVE_V1ALPHA2 = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "llm-d.ai/v1alpha2"},
        "kind": {"const": "InferenceObjective"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["poolRef"],
            "properties": {
                "poolRef": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "group": {"type": "string", "maxLength": 253,
                                  "pattern": r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
                        "kind": {"type": "string", "minLength": 1, "maxLength": 63,
                                 "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"},
                        "name": {"type": "string", "minLength": 1, "maxLength": 253},
                    },
                },
                "priority": {"type": "integer", "minimum": -2**31, "maximum": 2**31 - 1},
            },
        },
    },
}


def test_objectives_are_valid_under_the_current_llm_d_crd() -> None:
    import jsonschema

    for manifest in objectives({"llama-3.1-8b": {"critical": None, "standard": 0.0}, "code": {}}, namespace="llm",
                               continuations=True):
        jsonschema.validate(manifest, INFERENCE_OBJECTIVE_V1ALPHA2)
    with pytest.raises(jsonschema.ValidationError):  # the schema is no rubber stamp: the old group fails it
        jsonschema.validate(objectives({"chat": {}}, api_group="inference.networking.x-k8s.io")[0],
                            INFERENCE_OBJECTIVE_V1ALPHA2)


# llm-d-router v0.10.0 apix/config/v1alpha1/endpointpickerconfig_types.go (decoded strictly, so an unknown
# field fails the EPP's start) and the plugin types its registry names (pkg/epp/framework/plugins).
EPP_CONFIG_FIELDS = {"apiVersion", "kind", "featureGates", "plugins", "schedulingProfiles", "dataLayer",
                     "flowControl", "requestHandler", "saturationDetector", "parser"}
FLOW_CONTROL_FIELDS = {"maxBytes", "maxRequests", "defaultRequestTTL", "defaultPriorityBand",
                       "defaultNegativePriorityBand", "priorityBands", "usageLimitPolicyPluginRef",
                       "saturationDetector", "enableEviction"}
PLUGIN_TYPES = {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "max-score-picker",
                "utilization-detector", "approx-prefix-cache-producer", "concurrency-detector",
                "priority-holdback-policy", "inflight-load-producer"}
# The parameters each plugin decodes (v0.10.0: saturationdetector/concurrency/config.go apiConfig,
# usagelimits/priorityholdback/config.go, requestcontrol/dataproducer/inflightload/producer.go Config).
PLUGIN_PARAMETERS = {"utilization-detector": {"queueDepthThreshold", "kvCacheUtilThreshold"},
                     "concurrency-detector": {"maxConcurrency", "headroom", "concurrencyMode", "maxTokenConcurrency",
                                              "inFlightLoadProducerName"},
                     "priority-holdback-policy": {"shape", "domain", "minCeiling", "maxCeiling"},
                     "inflight-load-producer": {"addEstimatedOutputTokens", "outputRatio", "maxEstimatedOutputTokens",
                                                "prefixMatchInfoProducerName", "syncCrossReplicaState"}}
# concurrency/config.go validateConfig: the modes it accepts
DETECTOR_MODES = {"requests", "tokens", "hybrid"}


def test_the_example_epp_config_is_one_llm_d_router_v0_10_reads() -> None:
    epp = yaml.safe_load((ROOT / "examples" / "gateway" / "epp-config.yaml").read_text())
    assert (epp["apiVersion"], epp["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    assert set(epp) <= EPP_CONFIG_FIELDS and set(epp["flowControl"]) <= FLOW_CONTROL_FIELDS
    assert "saturationDetector" not in epp  # deprecated at top level in v0.10.0: flowControl.saturationDetector
    names = {p.get("name", p["type"]) for p in epp["plugins"]}  # a plugin without a name is named by its type
    assert {p["type"] for p in epp["plugins"]} <= PLUGIN_TYPES
    refs = {r["pluginRef"] for prof in epp["schedulingProfiles"] for r in prof["plugins"]}
    assert refs | {epp["flowControl"]["saturationDetector"]["pluginRef"]} <= names
    assert set(epp["plugins"][4]["parameters"]) == {"queueDepthThreshold", "kvCacheUtilThreshold"}


def test_the_shipped_example_is_what_the_cli_prints_with_no_limit(tmp_path: Path) -> None:
    doc = AdmissionDocument()
    doc.publish("llama-3.1-8b", {"critical": None, "standard": None, "sheddable": None})
    path = tmp_path / "doc.json"
    path.write_bytes(doc.json())
    res = CliRunner().invoke(app, ["admission", "objectives", str(path), "--namespace", "llm"])
    assert res.exit_code == 0, res.output
    text = (ROOT / "examples" / "gateway" / "inference-objectives.yaml").read_text()
    shipped = list(yaml.safe_load_all(text))
    assert shipped == list(yaml.safe_load_all(res.output))
    # byte for byte, less the example's comment lines: the example predates --continuations, which
    # changed nothing the command prints without it
    assert res.output == "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    epp = yaml.safe_load((ROOT / "examples" / "gateway" / "epp-config.yaml").read_text())
    # one flow-control band for every priority an objective can take
    bands = {b["priority"] for b in epp["flowControl"]["priorityBands"]}
    assert bands == {objective_priority(p, t) for p in ("sheddable", "standard", "critical") for t in (None, 0.0)}
    assert "flowControl" in epp["featureGates"]


@pytest.mark.parametrize(("source", "message", "status"), [
    # a server that does not answer exits 1, as dry-run on a Prometheus does (docs/architecture.md#exit-codes)
    ("http://127.0.0.1:1", "admission document at http://127.0.0.1:1/v1/admission: unreachable", 1),
    ("{tmp}/missing.json", "admission document at {tmp}/missing.json: No such file or directory", 2),
    ("127.0.0.1:9100", "admission document at 127.0.0.1:9100: No such file or directory (a URL starts with http://)",
     2),
    ("{tmp}/bad.json", "admission document at {tmp}/bad.json: services.chat: threshold of 'standard' must be a finite "
                       "number of seconds >= 0", 2),
    ("{tmp}/empty.json", "no thresholds published yet (the loop publishes them at its first decision)", 2),
])
def test_bad_sources_are_one_line_errors(tmp_path: Path, source: str, message: str, status: int) -> None:
    (tmp_path / "bad.json").write_text('{"apiVersion": "autoscaler/v1", "kind": "AdmissionThresholds", '
                                       '"services": {"chat": {"thresholds": {"standard": -1}}}}')
    (tmp_path / "empty.json").write_bytes(AdmissionDocument().json())
    res = CliRunner().invoke(app, ["admission", "objectives", source.format(tmp=tmp_path)])
    assert res.exit_code == status
    assert message.format(tmp=tmp_path) in res.output.replace("\n", "") and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_page_that_is_not_the_document_is_refused_naming_its_url() -> None:
    server = serve(CollectorRegistry(), "127.0.0.1:0", {"/v1/admission": lambda: b"<html>a login page</html>"})
    try:
        with pytest.raises(ValueError, match=rf"admission document at http://127.0.0.1:{server.port}/v1/admission: "
                                             r"not JSON"):
            read_document(f"http://127.0.0.1:{server.port}")
    finally:
        server.close()


def test_a_server_without_the_document_is_refused_naming_its_url() -> None:
    server = serve(CollectorRegistry(), "127.0.0.1:0", {})  # a metrics server only: /v1/admission is 404
    try:
        with pytest.raises(UnreachableError, match=rf"http://127.0.0.1:{server.port}/v1/admission.*404"):
            read_document(f"http://127.0.0.1:{server.port}")
        res = CliRunner().invoke(app, ["admission", "objectives", f"http://127.0.0.1:{server.port}"])
        assert res.exit_code == 1 and "HTTP 404" in res.output, res.output  # a server, not the loop: as unreachable
    finally:
        server.close()


@pytest.mark.parametrize(("source", "message"), [
    ("http://user:s3cret@127.0.0.1/", "credentials in the URL are not supported"),
    ("http://user:s3cret@127.0.0.1:9/", "credentials in the URL are not supported"),
    ("ftp://127.0.0.1/doc", "the URL must be http:// or https:// with a host"),
    ("http://127.0.0.1:99999/", "malformed URL"),
])
def test_urls_that_cannot_work_are_refused_without_showing_credentials(source: str, message: str) -> None:
    res = CliRunner().invoke(app, ["admission", "objectives", source])
    assert res.exit_code == 2 and message in res.output and "s3cret" not in res.output, res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("body", "message"), [
    ('{"apiVersion": "autoscaler/v1", "kind": "AdmissionThresholds", "services": [1, 2]}',
     "services is not a mapping"),
    ('{"apiVersion": "autoscaler/v1", "kind": "AdmissionThresholds", "services": {"s": {"thresholds": '
     '{"standard": 1' + "0" * 400 + "}}}}", "an integer of 401 digits"),
    ("[" * 100_000, "not JSON (RecursionError)"),
    ("\xff\xfe{", "not JSON"),
])
def test_malformed_documents_are_one_line_errors(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(body.encode("latin-1"))
    res = CliRunner().invoke(app, ["admission", "objectives", str(path)])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def drip_server(head: bytes, drip: bytes) -> tuple[socket.socket, int, threading.Event]:
    """A server that answers its one connection with ``head`` at once, then ``drip`` a byte per 0.1 s;
    (its socket, its port, set once every byte was sent)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    dripped_all = threading.Event()

    def serve_one() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        try:
            conn.sendall(head)
            for byte in drip:
                conn.sendall(bytes([byte]))
                time.sleep(0.1)
            dripped_all.set()
        except OSError:
            pass
        conn.close()

    threading.Thread(target=serve_one, daemon=True).start()
    return srv, srv.getsockname()[1], dripped_all


def test_a_server_that_drips_is_cut_off_at_the_deadline() -> None:
    """A body dripped a byte per 0.1 s (each read within any per-read timeout) is cut off by the 1-s
    total deadline: the read fails while the server is still dripping. No wall-clock bound is asserted
    (a busy machine only delays): the drip lasts 60 s, so an error before its end is the deadline's."""
    srv, port, dripped_all = drip_server(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b"{" * 600)
    with pytest.raises(UnreachableError, match=r"not read within 1 s|unreachable"):
        read_document(f"http://127.0.0.1:{port}", timeout_s=1.0)
    assert not dripped_all.is_set()
    srv.close()


def test_a_server_that_drips_its_headers_is_cut_off_at_the_deadline() -> None:
    """The status line and headers dripped a byte per 0.1 s (urllib's timeout bounds each socket read,
    not the headers as a whole) fail the read at the 1-s deadline too, while the server still drips
    (60 s of drip: an error before its end is the deadline's)."""
    srv, port, dripped_all = drip_server(b"", (b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 600)[:600])
    with pytest.raises(UnreachableError, match=r"not answered within 1 s"):
        read_document(f"http://127.0.0.1:{port}", timeout_s=1.0)
    assert not dripped_all.is_set()
    srv.close()


def test_admission_budget_from_a_server_that_is_not_there_exits_1() -> None:
    """A well-formed --from URL whose server refuses the connection is unreachable, not bad input:
    exit 1, as ``admission objectives`` exits (docs/architecture.md#exit-codes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # nothing listens there now
    res = CliRunner().invoke(app, ["admission", "budget", "--from", f"http://127.0.0.1:{port}"])
    assert res.exit_code == 1 and "unreachable" in res.output, res.output


def test_names_kubernetes_would_refuse_are_refused() -> None:
    for service in ("a..b", "a.-b", "x" * 64):
        with pytest.raises(ValueError, match=r"not a valid Kubernetes object name|cannot be a Kubernetes label"):
            objectives({service: {}})
    with pytest.raises(ValueError, match="--pool 'Bad Pool!' is not a valid InferencePool name"):
        objectives({"chat": {}}, pool="Bad Pool!")
    with pytest.raises(ValueError, match="--namespace 'NS With Space' is not a valid namespace"):
        objectives({"chat": {}}, namespace="NS With Space")


def check_epp_config(epp: dict) -> None:
    """``epp`` is an EndpointPickerConfig llm-d-router v0.10.0 decodes and whose references resolve."""
    assert (epp["apiVersion"], epp["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    assert set(epp) <= EPP_CONFIG_FIELDS and set(epp["flowControl"]) <= FLOW_CONTROL_FIELDS
    assert {p["type"] for p in epp["plugins"]} <= PLUGIN_TYPES
    for p in epp["plugins"]:
        assert set(p.get("parameters", {})) <= PLUGIN_PARAMETERS.get(p["type"], set())
    names = {p.get("name", p["type"]) for p in epp["plugins"]}
    refs = {r["pluginRef"] for prof in epp["schedulingProfiles"] for r in prof["plugins"]}
    refs |= {epp["flowControl"]["saturationDetector"]["pluginRef"]}
    refs |= {epp["flowControl"][k] for k in ("usageLimitPolicyPluginRef",) if k in epp["flowControl"]}
    assert refs <= names


def test_the_itl_example_is_what_admission_budget_prints_for_the_embedded_fleet() -> None:
    res = CliRunner().invoke(app, ["admission", "budget", "--output", "yaml"])
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.output)
    assert printed == yaml.safe_load((ROOT / "examples" / "gateway" / "epp-config-itl.yaml").read_text())
    check_epp_config(printed)
    (detector,) = [p for p in printed["plugins"] if p["type"] == "concurrency-detector"]
    cfg = default_config()
    svc = cfg.services[0]
    assert detector["parameters"]["maxConcurrency"] == min(concurrency_budget(svc, cfg.engine, "auto").values())
    bands = {b["priority"] for b in printed["flowControl"]["priorityBands"]}
    assert bands == {objective_priority(p, t) for p in ("sheddable", "standard", "critical") for t in (None, 0.0)}


def test_admission_budget_writes_the_holdback_policy_on_request_and_refuses_what_the_plugin_would() -> None:
    res = CliRunner().invoke(app, ["admission", "budget", "--output", "yaml", "--min-ceiling", "0.5"])
    assert res.exit_code == 0, res.output
    epp = yaml.safe_load(res.output)
    check_epp_config(epp)
    assert epp["flowControl"]["usageLimitPolicyPluginRef"] == "priority-holdback-policy"
    (policy,) = [p for p in epp["plugins"] if p["type"] == "priority-holdback-policy"]
    assert policy["parameters"] == {"shape": "linear", "domain": "rank", "minCeiling": 0.5, "maxCeiling": 1.0}
    res = CliRunner().invoke(app, ["admission", "budget", "--min-ceiling", "0.5"])
    assert res.exit_code == 2 and "it needs -o yaml" in res.output, res.output
    for args, message in ((["--min-ceiling", "1.0"], "--min-ceiling 1 must be in [0, 1)"),
                          (["--output", "json"], "-o/--output must be one of table, yaml, got 'json'"),
                          (["--service", "nope"], "nope")):
        res = CliRunner().invoke(app, ["admission", "budget", "--output", "yaml", *args]
                                 if args[0] != "--output" else ["admission", "budget", *args])
        assert res.exit_code == 2 and message in res.output, res.output
    assert epp_config(3)["plugins"][4]["parameters"]["maxConcurrency"] == 3
    with pytest.raises(ValueError, match="max_concurrency must be >= 1"):
        epp_config(0)


def test_admission_budget_from_the_live_document_takes_the_learned_budget(tmp_path: Path) -> None:
    """--from: the budget the MPC published replaces the model's for the variants it names; the EPP's
    one number is the fewest of the servable variants'. Served over HTTP as the loop serves it."""
    cfg = default_config()
    svc = cfg.services[0]
    model = concurrency_budget(svc, cfg.engine, "auto")
    doc = AdmissionDocument()
    assert doc.publish(svc.name, {"standard": 1.0}, {"gh200": 17, "h100": 40}).ok
    server = serve(CollectorRegistry(), "127.0.0.1:0", {"/v1/admission": doc.json})
    try:
        res = CliRunner().invoke(app, ["admission", "budget", "-o", "yaml", "--from", f"http://127.0.0.1:{server.port}"])
    finally:
        server.close()
    assert res.exit_code == 0, res.output
    epp = yaml.safe_load(res.output)
    check_epp_config(epp)
    (detector,) = [p for p in epp["plugins"] if p["type"] == "concurrency-detector"]
    assert detector["parameters"]["maxConcurrency"] == min(17, 40, model["a100"])
    path = tmp_path / "admission.json"
    path.write_bytes(doc.json())
    res = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["admission", "budget", "--from", str(path)])
    assert res.exit_code == 0, res.output
    rows = {line.split("│")[1].strip(): line.split("│")[-2].strip() for line in res.output.splitlines()
            if line.count("│") >= 6 and line.split("│")[1].strip() in model}
    assert rows == {"gh200": "17", "h100": "40", "a100": str(model["a100"])}
    assert "learned budget" in res.output


@pytest.mark.parametrize(("doc", "args", "message"), [
    ({"standard": 1.0}, [], "no ITL budget for service"),
    ({"standard": 1.0, "budget": {"tpu": 3}}, [], "has no variant tpu"),
    ({"standard": 1.0, "budget": {"gh200": 3}}, ["--mode", "tokens"], "it needs --mode requests"),
    # the embedded fleet's engine runs at most 256 at once: a budget above it is from another fleet
    ({"standard": 1.0, "budget": {"gh200": 257}}, [], "above engine.max_num_seqs (256)"),
])
def test_admission_budget_from_a_document_without_a_usable_budget_is_one_line(
        tmp_path: Path, doc: dict, args: list[str], message: str) -> None:
    d = AdmissionDocument()
    budget = doc.pop("budget", None)
    assert d.publish(default_config().services[0].name, doc, budget).ok
    (tmp_path / "a.json").write_bytes(d.json())
    res = CliRunner().invoke(app, ["admission", "budget", "--from", str(tmp_path / "a.json"), *args])
    assert res.exit_code == 2 and message in res.output, res.output


@pytest.mark.parametrize("mode", ["tokens", "hybrid"])
def test_admission_budget_writes_the_token_modes(tmp_path: Path, mode: str) -> None:
    """``--mode tokens|hybrid``: the detector holds every endpoint to the fewest of the variants' token
    budgets (``token_budget`` with streaming clients and the prefix scorer's discount), ``hybrid`` to
    the request budget as well; with the fleet's output estimate the producer is declared with it."""
    res = CliRunner().invoke(app, ["admission", "budget", "--output", "yaml", "--mode", mode, "--streaming"])
    assert res.exit_code == 0, res.output
    epp = yaml.safe_load(res.output)
    check_epp_config(epp)
    (detector,) = [p for p in epp["plugins"] if p["type"] == "concurrency-detector"]
    cfg = default_config()
    svc = cfg.services[0]
    tokens = min(token_budget(svc, cfg.engine, cfg.simulator.gateway, True, True).values())
    want = {"concurrencyMode": mode, "maxTokenConcurrency": tokens, "headroom": 0.0}
    if mode == "hybrid":
        want["maxConcurrency"] = min(concurrency_budget(svc, cfg.engine, "auto").values())
    assert detector["parameters"] == want and detector["parameters"]["concurrencyMode"] in DETECTOR_MODES
    assert not [p for p in epp["plugins"] if p["type"] == "inflight-load-producer"]  # the EPP's default one
    doc = cfg.model_dump(mode="json", exclude_unset=True)
    doc.setdefault("simulator", {})["gateway"] = {"output_estimate": True, "max_estimated_output_tokens": 300}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(app, ["admission", "budget", "--config", str(tmp_path / "fleet.yaml"), "--output", "yaml",
                                   "--mode", mode])
    assert res.exit_code == 0, res.output
    epp = yaml.safe_load(res.output)
    check_epp_config(epp)
    (producer,) = [p for p in epp["plugins"] if p["type"] == "inflight-load-producer"]
    assert producer["parameters"] == {"addEstimatedOutputTokens": True, "outputRatio": 1.5,
                                      "maxEstimatedOutputTokens": 300}
    (detector,) = [p for p in epp["plugins"] if p["type"] == "concurrency-detector"]
    assert detector["parameters"]["maxTokenConcurrency"] > 10 * tokens  # charged to the last token, not the first
    res = CliRunner().invoke(app, ["admission", "budget", "--mode", "magic"])
    assert res.exit_code == 2 and "--mode must be one of requests, tokens, hybrid, got 'magic'" in res.output
    with pytest.raises(ValueError, match="mode tokens needs a max_token_concurrency >= 1, got None"):
        epp_config(3, mode="tokens")


def test_admission_budget_prints_each_variants_budget() -> None:
    res = CliRunner().invoke(app, ["admission", "budget"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    cfg = default_config()
    budget = concurrency_budget(cfg.services[0], cfg.engine, "auto")
    for name, n in budget.items():
        assert any(line.split("│")[1].strip() == name and line.split("│")[-2].strip() == str(n)
                   for line in res.output.splitlines() if "│" in line)
    assert f"maxConcurrency): {min(budget.values())}" in res.output


def test_admission_budget_says_why_a_budget_is_capped_and_which_variant_the_pool_takes() -> None:
    """The table's notes: budgets stop at the engine's max_num_seqs (256 on the embedded fleet, where
    h100 and gh200 carry 327 and 337 in flight at their ITL bound), and the pool's one number is the
    fewest of the variants' budgets, named (a100's 112 there)."""
    cfg = default_config()
    svc = cfg.services[0]
    budgets = concurrency_budget(svc, cfg.engine, "auto")
    least = min(budgets.values())
    (fewest,) = [n for n, b in budgets.items() if b == least]
    res = CliRunner().invoke(app, ["admission", "budget"], terminal_width=200)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "budget: at most engine.max_num_seqs (256), the most a replica runs at once (h100, gh200 capped)" in lines
    assert f"one number for the pool (the EPP's maxConcurrency): {least}, {fewest}'s budget, the fewest" in lines
    assert cfg.engine.max_num_seqs == 256 and (least, fewest) == (112, "a100")
