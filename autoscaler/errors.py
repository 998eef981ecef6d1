"""Errors raised for bad user input. Each carries a one-line, user-facing message."""


class AutoscalerError(Exception):
    """Base class: the CLI prints ``str(err)`` on one line and exits non-zero."""


class ConfigError(AutoscalerError):
    """A fleet file is unreadable or invalid. Message names the file, the key and the problem."""


class TraceError(AutoscalerError):
    """A trace file is unreadable or malformed. Message names the file, the line and the problem."""


class ProfileError(AutoscalerError):
    """An unknown GPU/model performance profile was requested."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by the command line's handler so a terminated run cleans up as an interrupted one."""
