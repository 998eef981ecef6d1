"""Embedded fleet simulator: request-level, event-driven model of vLLM replicas behind a router."""
