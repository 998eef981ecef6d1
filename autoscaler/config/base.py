"""Kubernetes name checks of the fleet file; its sections derive from ``autoscaler.schema.Strict``
(re-exported here with ``MAX_INT``)."""

from __future__ import annotations

import re

from autoscaler.schema import MAX_INT, Strict

__all__ = ["DNS_LABEL", "DNS_SUBDOMAIN", "MAX_INT", "MIN_WAIT_S", "Strict", "check_name"]

MIN_WAIT_S = 0.1
"""The shortest timeout, deadline or retry period a fleet file may set, seconds: below it a call fails on
network latency alone, or a loop spins (``staleness_s: 1e-300`` used to be accepted)."""

# Kubernetes object names (apimachinery validation, RFC 1123): a DNS label (<= 63, e.g. a variant, so
# that "<service>-<variant>" stays a valid Deployment name) and a DNS subdomain (<= 253, e.g. a service).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_name(value: str, what: str, label: bool) -> str:
    """``value`` if it is a Kubernetes DNS label (``label``) or subdomain, else ValueError naming ``what``."""
    pattern, limit, kind = (DNS_LABEL, 63, "DNS label") if label else (DNS_SUBDOMAIN, 253, "DNS subdomain")
    if not (pattern.fullmatch(value) and len(value) <= limit):
        raise ValueError(f"{what} {value!r} is not a Kubernetes {kind} (lowercase letters, digits and '-'"
                         f"{'' if label else ' and .'}, starting and ending with a letter or digit, at most "
                         f"{limit} characters)")
    return value
