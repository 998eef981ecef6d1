"""Reading a fleet file: YAML with duplicate keys refused, validation, and the checks that need the
performance profiles. ``load_config`` and ``parse_config`` raise ``ConfigError`` naming the file, the
key and the problem.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler.config.fleet import FleetConfig, Variant
from autoscaler.errors import ConfigError, ProfileError
from autoscaler.files import read_regular
from models.capacity import marginal_costs
from models.profiles import get_profile, is_profile_file, list_profiles
from models.profiles.specs import GPUS


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key written twice in one mapping is an error (PyYAML keeps
    the last). Keys brought in by a merge key (``<<: *anchor``) may be overridden, as YAML allows."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in getattr(node, "value", []):
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # unhashable: PyYAML's own check reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}'", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]



def _key_path(loc: tuple[int | str, ...], data: object) -> str:
    """Render a pydantic error location as a YAML key path, naming list items by their ``name``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int) and isinstance(node, list) and 0 <= item < len(node):
            node = node[item]
            label = node.get("name") if isinstance(node, dict) else None
            parts.append(f"[{label}]" if label else f"[{item}]")
        else:
            node = node.get(item) if isinstance(node, dict) else None
            parts.append(f".{item}" if parts else str(item))
    return "".join(parts) or "<root>"


def parse_config(data: object, source: str = "<fleet>", base_dir: Path | None = None) -> FleetConfig:
    """Validate a parsed YAML document; raises ``ConfigError`` '<source>: <key>: <problem>'.

    A variant's ``profile`` that names a profile file (``*.json``) is made absolute against
    ``base_dir`` (the fleet file's directory; the working directory if None).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping with a 'services' list")
    migrated = moved_keys(data, source)
    moved, data = migrated is not data, migrated
    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        msg = err["msg"].removeprefix("Value error, ")
        key = _key_path(tuple(err["loc"]), data)
        if moved and key.split(".")[0] == "engine":  # name the key where the file has it
            key = f"simulator.{key}"
        raise ConfigError(f"{source}: {key + ': ' if err['loc'] else ''}{msg}{more}") from None
    cfg = _resolve_profile_files(cfg, Path.cwd() if base_dir is None else base_dir)
    _check_profiles(cfg, source)
    return cfg


def _resolve_profile_files(cfg: FleetConfig, base_dir: Path) -> FleetConfig:
    """``cfg`` with every profile file path absolute (relative ones against ``base_dir``)."""
    def resolved(profile: str) -> str:
        return str(base_dir / profile) if is_profile_file(profile) and not Path(profile).is_absolute() else profile

    def variants(vs: list[Variant]) -> list[Variant]:
        return [v.model_copy(update={"profile": resolved(v.profile)}) for v in vs]

    services = []
    for s in cfg.services:
        update: dict[str, Any] = {"variants": variants(s.variants)}
        if s.roles is not None:
            update["roles"] = s.roles.model_copy(update={"prefill": variants(s.roles.prefill),
                                                         "decode": variants(s.roles.decode)})
        services.append(s.model_copy(update=update))
    return cfg.model_copy(update={"services": services})


def _check_profiles(cfg: FleetConfig, source: str) -> None:
    """Every variant names a known GPU and a shipped profile or a valid profile file of that GPU and of
    its GPUs per replica, and every ITL objective is above the profile's fixed step time."""
    known = list_profiles()
    gpus = {key.upper(): key for key in GPUS}
    for s in cfg.services:
        placed = [("variants", v) for v in s.variants] + [(f"roles.{role}", v) for role, v in s.role_variants()]
        for key, v in placed:
            where = f"{source}: services[{s.name}].{key}[{v.name}]"
            if v.gpu.upper() not in gpus:
                raise ConfigError(f"{where}.gpu: unknown GPU '{v.gpu}'; known: {', '.join(sorted(gpus))}")
            if not is_profile_file(v.profile) and v.profile not in known:
                raise ConfigError(
                    f"{where}.profile: unknown performance profile '{v.profile}' (GPU {v.gpu}); "
                    f"known: {', '.join(known)}, or a profile file (*.json)"
                )
            try:
                profile = get_profile(v.profile)
            except ProfileError as exc:
                raise ConfigError(f"{where}.profile: {exc}") from None
            if gpus[v.gpu.upper()] != profile.gpu:
                raise ConfigError(f"{where}.gpu: '{v.gpu}', but profile '{v.profile}' was measured on "
                                  f"{profile.gpu.upper()}")
            if v.gpus_per_replica != profile.tensor_parallel:
                raise ConfigError(f"{where}.gpus_per_replica: {v.gpus_per_replica}, but profile '{v.profile}' "
                                  f"describes a replica of {profile.tensor_parallel} GPUs (tensor parallel)")
            t0 = marginal_costs(profile)[0]
            for cls, slo in s.slo.items():
                if slo.itl_s <= t0:
                    raise ConfigError(
                        f"{source}: services[{s.name}].slo.{cls}.itl_s: {slo.itl_s} s is at or below the "
                        f"fixed step time {t0:.4g} s of variant {v.name} ({v.profile}); no batch can meet it"
                    )


MAX_FLEET_BYTES = 16 * 2**20
"""A fleet file is read only up to this size (the largest fleet imaginable is a few hundred KiB)."""


def load_config(path: str | Path) -> FleetConfig:
    """Read and validate a fleet YAML file.

    Raises:
        ConfigError: the file is missing, is not YAML, or fails validation; the message names the
            file and the key.
    """
    p = Path(path)
    try:
        text = read_regular(p, MAX_FLEET_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read fleet file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a UTF-8 text file (byte {exc.start})") from None
    except ValueError as exc:  # not a regular file, or too large
        raise ConfigError(f"{p}: cannot read fleet file: {exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ConfigError(f"{p}: YAML nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        what = f"{context}; {problem}" if context and problem != str(exc) else problem
        raise ConfigError(f"{p}:{where} invalid YAML: {' '.join(what.split())}") from None
    except (ValueError, OverflowError) as exc:  # a scalar PyYAML cannot convert (!!int abc, 2024-13-45)
        raise ConfigError(f"{p}: invalid YAML value: {' '.join(str(exc).split())}") from None
    return parse_config(data, str(p), p.parent)


def default_config() -> FleetConfig:
    """The embedded example fleet (same content as ``examples/fleet.yaml``), shipped in the package."""
    return parse_config(default_fleet_document(), "<embedded default fleet>")


def moved_keys(doc: dict[str, Any], source: str = "<fleet>") -> dict[str, Any]:
    """``doc`` (a fleet document or a patch of one) with the keys that moved put in their new places:
    ``simulator.engine`` -> ``engine`` (the engine limits bound live fleets too), with a
    ``FutureWarning`` naming ``source``. Apply it to a patch before laying it over a base (``merged``),
    so the patch's old key overrides the base's new one; ``doc`` itself when nothing moved.

    Raises:
        ConfigError: the document has both places (naming ``source``).
    """
    sim = doc.get("simulator")
    if not (isinstance(sim, dict) and "engine" in sim):
        return doc
    if "engine" in doc:
        raise ConfigError(f"{source}: simulator.engine and engine both given: the engine limits now live only "
                          "under engine")
    warnings.warn(f"{source}: simulator.engine is now engine (top level); read from simulator.engine",
                  FutureWarning, stacklevel=2)
    return {**doc, "engine": sim["engine"], "simulator": {k: v for k, v in sim.items() if k != "engine"}}


def merged(base: Any, patch: Any) -> Any:
    """``patch`` laid over the fleet document ``base``: mappings key by key, lists of named mappings
    entry by entry on ``name`` (unnamed patch entries are appended), anything else replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        return {**base, **{k: merged(base[k], v) if k in base else v for k, v in patch.items()}}
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(x, dict) for x in base + patch):
        by_name = {p.get("name"): p for p in patch}
        out = [merged(b, by_name[b.get("name")]) if b.get("name") in by_name else b for b in base]
        return out + [p for p in patch if p.get("name") not in {b.get("name") for b in base}]
    return patch


def default_fleet_document() -> dict[str, Any]:
    """The embedded example fleet as a parsed YAML document (to lay a patch over)."""
    from importlib.resources import files

    return yaml.load(files("autoscaler").joinpath("default_fleet.yaml").read_text(), Loader=_UniqueKeyLoader)
