"""requirements.lock (the image's dependencies, Dockerfile): every runtime dependency of pyproject.toml
pinned exactly, within the range pyproject declares, each pin with at least one sha256 hash, and
everything it pins needed by something (issue 31, item 13). The lock is pip-compile's output
(``pip-compile --generate-hashes``, the command at its top); this checks it has not drifted from
pyproject.toml."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from support.paths import ROOT


def lock() -> dict[str, tuple[Version, list[str], list[str]]]:
    """name -> (pinned version, hashes, the "# via" names) of requirements.lock."""
    out: dict[str, tuple[Version, list[str], list[str]]] = {}
    current = ""
    via_block = False
    for raw in (ROOT / "requirements.lock").read_text().splitlines():
        line = raw.strip()
        if m := re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s\\]+)\s*\\?", line):
            current = canonicalize_name(m.group(1))
            assert current not in out, f"requirements.lock: {current} pinned twice"
            out[current] = (Version(m.group(2)), [], [])
            via_block = False
        elif m := re.fullmatch(r"--hash=sha256:([0-9a-f]{64})\s*\\?", line):
            out[current][1].append(m.group(1))
        elif line.startswith("# via"):
            rest = line.removeprefix("# via").strip()
            via_block = not rest
            if rest:
                out[current][2].append(rest)
        elif via_block and line.startswith("#   "):
            out[current][2].append(line.removeprefix("#").strip())
        elif line and not line.startswith("#"):
            raise AssertionError(f"requirements.lock: a line that is no pin or hash: {line!r}")
    return out


def test_the_lock_pins_every_runtime_dependency_in_its_range_with_hashes() -> None:
    pins = lock()
    deps = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    for req in deps:
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements.lock: {req.name} (a runtime dependency) is not pinned"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} is outside {req.specifier}"
    for name, (version, hashes, via) in pins.items():
        assert hashes, f"requirements.lock: {name}=={version} has no hash"
        assert via, f"requirements.lock: {name}=={version} is needed by nothing"
    assert "kmock" not in pins and "pytest" not in pins  # the image holds no test dependency


def test_a_package_several_need_lists_each_of_them() -> None:
    """The reader reads a multi-line "via": urllib3 is pyproject's own dependency, requests' and the
    kubernetes client's (their metadata requires it), so pip-compile lists all three."""
    pins = lock()
    version, hashes, via = pins["urllib3"]
    assert version >= Version("2.0.2") and len(hashes) >= 1
    assert {"requests", "kubernetes", "llm-autoscaler"} <= {v.split()[0] for v in via}
