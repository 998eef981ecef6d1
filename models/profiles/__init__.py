"""Performance profiles: seconds per vLLM engine iteration for a model on a GPU.

Public API: ``PerformanceProfile``, ``get_profile(name)``, ``list_profiles()``. Shipped profiles:
``llama-3-8b/a100-80gb``, ``llama-3-8b/gh200``, ``llama-3-8b/h100-sxm``. Coefficients are fitted by
``python -m models.profiles.fit`` and loaded from the package data file ``coefficients.json``.
"""

from models.profiles.profile import PerformanceProfile, get_profile, list_profiles

__all__ = ["PerformanceProfile", "get_profile", "list_profiles"]
