"""The ``kubectl`` the tests run: ``$KUBECTL`` (CI unpacks Debian's 1.20 there) or the one on PATH;
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
        pytest.fail("kubectl is not installed: install Debian's kubernetes-client (apt-get install "
                    "kubernetes-client; CI installs it) or set KUBECTL to a kubectl binary", pytrace=False)
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
