"""A profile kept in a file of its own: what a fleet file's ``profile: ./my-model-h100.json`` names.

The file is one JSON object with the fields of a shipped entry of ``coefficients.json`` (extra
provenance fields are allowed and ignored):

- ``model`` (key or free name), ``gpu`` (a key of ``specs.GPUS``), ``tensor_parallel`` (>= 1);
- ``architecture``: the ``specs.ModelSpec`` shapes (``num_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_kv_heads``, ``head_size``, ``intermediate_size``, ``vocab_size``,
  ``max_position_embeddings``, ``num_parameters``; optional ``num_experts``, ``experts_per_token``,
  ``attention_bias``, ``bytes_per_param``), from which the KV bytes per token follow;
- ``coefficients``: ``step_overhead_s`` (> 0), ``prefill_s_per_token``, ``decode_s_per_seq`` (>= 0),
  ``bandwidth_efficiency`` (in (0, 1]); optional ``attention_tokens_per_pair`` (>= 0: a fitted
  attention term, as the shipped Splitwise profiles carry; absent: the architecture's FLOP ratio);
  optional ``weight_read_s`` (>= 0; > 0 selects the roofline step form, ``PerformanceProfile``);
- ``rows_fitted``, ``rows_held_out`` (>= 0), ``heldout_mape`` (>= 0, or null with no held-out rows),
  ``fit_mape`` (optional).

``kv_bytes_per_token``, the attention term unless given (``specs.ModelSpec.attention_tokens_per_pair``) and
``mem_bandwidth_bytes_per_s`` (the replica's: ``tensor_parallel`` x the GPU's datasheet figure) are
derived; if the file states the first or the last they must agree.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from autoscaler.errors import ProfileError
from autoscaler.schema import Strict
from models.profiles.jsonfile import read_object
from models.profiles.profile import PerformanceProfile
from models.profiles.specs import GPUS, ModelSpec


class Architecture(Strict):
    """The shapes of ``specs.ModelSpec`` (its ``key`` and ``source`` are the file's own)."""

    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    max_position_embeddings: int = Field(ge=1)
    num_parameters: int = Field(ge=1)
    num_experts: int = Field(default=1, ge=1)
    experts_per_token: int = Field(default=1, ge=1)
    attention_bias: bool = False
    bytes_per_param: int = Field(default=2, ge=1)


class Coefficients(Strict):
    """The fitted terms of ``PerformanceProfile``."""

    step_overhead_s: float = Field(gt=0)
    prefill_s_per_token: float = Field(ge=0)
    decode_s_per_seq: float = Field(ge=0)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    attention_tokens_per_pair: float | None = Field(default=None, ge=0)
    weight_read_s: float = Field(default=0.0, ge=0)


class ProfileFile(Strict):
    """One profile file (fields in the module doc)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str = Field(min_length=1)
    gpu: str
    tensor_parallel: int = Field(ge=1)
    architecture: Architecture
    coefficients: Coefficients
    rows_fitted: int = Field(ge=0)
    rows_held_out: int = Field(ge=0)
    heldout_mape: float | None = Field(ge=0)
    fit_mape: float | None = Field(default=None, ge=0)
    kv_bytes_per_token: int | None = None
    mem_bandwidth_bytes_per_s: float | None = None


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in loc) or "<root>"


def load_profile_file(path: Path) -> PerformanceProfile:
    """The profile in the JSON file ``path``, named by the path as given.

    Raises:
        ProfileError: the file is unreadable, not JSON, or a field is missing or invalid; one line
            naming the file and the field.
    """
    doc = read_object(path, "profile file")
    try:
        f = ProfileFile.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ProfileError(f"{path}: {_field(tuple(err['loc']))}: {err['msg'].removeprefix('Value error, ')}") from None
    if f.gpu not in GPUS:
        raise ProfileError(f"{path}: gpu: unknown GPU '{f.gpu}'; known: {', '.join(sorted(GPUS))}")
    spec = ModelSpec(key=f.model, source=str(path), **f.architecture.model_dump())
    bandwidth = f.tensor_parallel * GPUS[f.gpu].mem_bandwidth_bytes_per_s
    for field, stated, derived in [("kv_bytes_per_token", f.kv_bytes_per_token, spec.kv_bytes_per_token),
                                   ("mem_bandwidth_bytes_per_s", f.mem_bandwidth_bytes_per_s, bandwidth)]:
        if stated is not None and stated != derived:
            raise ProfileError(f"{path}: {field}: {stated:g}, but the architecture, GPU and tensor_parallel "
                               f"give {derived:g}")
    coefficients = f.coefficients.model_dump()
    if coefficients["attention_tokens_per_pair"] is None:
        coefficients["attention_tokens_per_pair"] = spec.attention_tokens_per_pair
    return PerformanceProfile(name=str(path), model=f.model, gpu=f.gpu, kv_bytes_per_token=spec.kv_bytes_per_token,
                              mem_bandwidth_bytes_per_s=bandwidth, tensor_parallel=f.tensor_parallel, **coefficients)
