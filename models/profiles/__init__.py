"""Performance profiles: seconds per vLLM engine iteration for a model on one replica (one GPU or a
tensor-parallel group).

Public API: ``PerformanceProfile``, ``get_profile(name_or_file)``, ``list_profiles()``,
``shipped_entries()``, ``listing()``, ``group_listing()``, ``profile_name(model, gpu, tp)``, ``is_profile_file(name)``,
``prefill_pairs(start, tokens)``. The shipped
profiles (``autoscaler profiles list``) are fitted by ``python -m models.profiles.fit`` and loaded
from the package data file ``coefficients.json``; ``models.profiles.profile_file`` reads a profile
kept in a file of its own; ``models.profiles.measured`` fits one to an operator's measured engine
intervals, which ``models.profiles.vllm_bench`` reads off vLLM benchmark results.
"""

from models.profiles.lookup import get_profile, is_profile_file
from models.profiles.profile import (
    PerformanceProfile,
    group_listing,
    list_profiles,
    listing,
    prefill_pairs,
    profile_name,
    shipped_entries,
)

__all__ = ["PerformanceProfile", "get_profile", "group_listing", "is_profile_file", "list_profiles", "listing",
           "prefill_pairs", "profile_name", "shipped_entries"]
