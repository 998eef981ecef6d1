"""The ``kubectl`` the tests run: ``$KUBECTL`` (.ci/run sets it: .ci/kubectl) or the one on PATH;
a kubeconfig for an emulated API server."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def kubectl() -> str:
    """The kubectl binary; the test fails (never skips) when there is none."""
    exe = shutil.which(os.environ.get("KUBECTL", "kubectl"))
    if exe is None:
        pytest.fail("kubectl is not installed: set KUBECTL to a kubectl binary (1.27 or later; "
                    "`bash .ci/kubectl` prints one, unpacking it when the machine has none)", pytrace=False)
    return exe


def kubeconfig(path: Path, server: str) -> Path:
    """Write a kubeconfig at ``path`` whose one context talks to ``server`` without credentials."""
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: emulated, cluster: {{server: "{server}"}}}}]
contexts: [{{name: emulated, context: {{cluster: emulated, user: anonymous}}}}]
current-context: emulated
users: [{{name: anonymous, user: {{}}}}]
""")
    return path
