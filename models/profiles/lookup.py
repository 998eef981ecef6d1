"""What a fleet file's ``profile:`` names: a shipped profile, or a profile file (``profile_file``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from models.profiles.profile import PerformanceProfile, shipped_profile
from models.profiles.profile_file import load_profile_file

PROFILE_FILE_SUFFIX = ".json"
"""A ``profile:`` value ending in this is a path to a profile file; anything else a shipped name."""


def is_profile_file(name: str) -> bool:
    """Whether ``name`` denotes a profile file (it ends in ``PROFILE_FILE_SUFFIX``)."""
    return name.endswith(PROFILE_FILE_SUFFIX)


@cache
def _file_profile(path: str) -> PerformanceProfile:
    return load_profile_file(Path(path))


def get_profile(name: str) -> PerformanceProfile:
    """The shipped profile ``name``, or the profile in the file ``name`` (relative to the working
    directory; the fleet loader makes a fleet file's relative paths absolute).

    Raises:
        ProfileError: an unknown shipped name (the message lists the shipped ones), or a bad file
            (the message names the file and the field).
    """
    return _file_profile(name) if is_profile_file(name) else shipped_profile(name)
