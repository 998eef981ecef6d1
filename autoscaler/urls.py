"""Prometheus base URLs: the check a URL must pass (fleet file or ``--prometheus-url``) and masking
the credentials a URL may carry before it is shown."""

from __future__ import annotations

import re
import urllib.parse

# The userinfo of a URL (``user:password@``), up to the last ``@`` before the path; or, for a URL
# written without its scheme, a leading ``user:password@``.
_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")
_BARE_USERINFO = re.compile(r"^[^/?#\s:@]+:[^/?#\s]*@")


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it (``scheme://user:password@``, or a leading
    ``user:password@`` where the scheme was left out) masked."""
    return _BARE_USERINFO.sub("***@", _USERINFO.sub("***@", text))


def check_url(url: str, what: str = "Prometheus URL") -> None:
    """Check that ``url`` is an ``http(s)://HOST[:PORT][/path]`` base URL (``what`` names it in a message).

    Raises:
        ValueError: it is not; the message shows the URL with its credentials masked.
    """
    shown = redact(url)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"malformed {what} '{shown}': {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"malformed {what} '{shown}': must start with http:// or https://")
    if not parts.hostname:
        raise ValueError(f"malformed {what} '{shown}': no host")
    if port == 0:
        raise ValueError(f"malformed {what} '{shown}': port must be in 1..65535")
    if parts.query or parts.fragment:
        raise ValueError(f"malformed {what} '{shown}': a base URL has no ?query or #fragment")
