"""Hypothesis profiles: "ci" (the default: the whole suite stays fast) and "long" (the
100,000-history run of docs/reliability.md), chosen with HYPOTHESIS_PROFILE."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", parent=settings.get_profile("ci"), max_examples=100_000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
