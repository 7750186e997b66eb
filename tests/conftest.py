"""Hypothesis profiles, chosen with HYPOTHESIS_PROFILE: "ci" (the default, derandomized) keeps the
property tests to about a minute and reports a failing example unshrunk; "explore" is the same
with new random histories every run (shrinking these histories can
take minutes; tests/strategies/reduce.py or the long profile does it); "long" runs 100,000
histories per property test and shrinks. See docs/reliability.md."""

import os

from hypothesis import HealthCheck, Phase, settings

_common = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# "ci" is derandomized: the same 600 histories every run, so a red CI is a regression, not a
# lucky draw; "explore" draws new ones every run (what found the bugs in docs/reliability.md).
settings.register_profile("ci", max_examples=600, derandomize=True,
                          phases=[Phase.explicit, Phase.generate], **_common)
settings.register_profile("explore", max_examples=600, phases=[Phase.explicit, Phase.reuse, Phase.generate], **_common)
settings.register_profile("long", max_examples=100_000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
