"""Go duration strings (metav1.Duration) as Kueue's Configuration writes them: 168h, 10m, 1h30m, 45s."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds; ValueError naming the problem for anything Go's time.ParseDuration refuses."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"a duration such as 10m or 168h is required, got {text!r}")
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    sign = -1.0 if text[0] == "-" else 1.0
    body = text[1:] if text[0] in "+-" else text
    while pos < len(body):
        m = _PART.match(body, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}: use a number and a unit (ns, us, ms, s, m, h), e.g. 90s or 1h30m")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total
