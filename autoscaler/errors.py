"""Errors raised for bad user input. Each carries a one-line, user-facing message."""


class AutoscalerError(Exception):
    """Base class: the CLI prints ``str(err)`` on one line and exits 2 (``UnreachableError``: 1)."""


class ConfigError(AutoscalerError):
    """A fleet file is unreadable or invalid. Message names the file, the key and the problem."""


class TraceError(AutoscalerError):
    """A trace file is unreadable or malformed. Message names the file, the line and the problem."""


class ProfileError(AutoscalerError):
    """An unknown GPU/model performance profile was requested."""


class UnreachableError(AutoscalerError):
    """A server the command reads (Prometheus, the loop's ``GET /v1/admission``) did not answer, not
    in time, or answered with an HTTP error: the input was well-formed, the server is not there or not
    what it names. The CLI exits 1 on it, not 2 as for bad input (docs/architecture.md#exit-codes)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by the command line's handler so a terminated run cleans up as an interrupted one."""
