"""Kubernetes resource quantities, exact.

A quantity is kept as a ``Fraction`` so nothing is ever rounded while parsing or
adding. Printing follows apimachinery's canonical form (``resource.Quantity.String``):
binary suffixes for quantities written with them, decimal SI otherwise, the largest
suffix that keeps the mantissa whole.

The quota engine itself counts in integers the way Kueue does (milli-units for cpu,
whole units, rounded up, for everything else): see ``to_engine_int``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@dataclass(frozen=True, slots=True)
class Quantity:
    value: Fraction
    format: str = DECIMAL_SI

    # -- construction -------------------------------------------------------
    @classmethod
    def parse(cls, raw: Any) -> "Quantity":
        if isinstance(raw, Quantity):
            return raw
        if isinstance(raw, bool) or raw is None:
            raise QuantityError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {raw!r}")
        if isinstance(raw, int):
            return cls(Fraction(raw), DECIMAL_SI)
        if isinstance(raw, float):
            try:
                return cls(Fraction(Decimal(repr(raw))), DECIMAL_SI)
            except (InvalidOperation, ValueError) as exc:
                raise QuantityError(f"{raw!r} is not a quantity") from exc
        if not isinstance(raw, str):
            raise QuantityError(f"a quantity must be a string or a number, got {type(raw).__name__}")
        text = raw.strip()
        m = _QUANTITY_RE.match(text)
        if not m:
            raise QuantityError(
                f"quantities must match the regular expression "
                f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {raw!r}"
            )
        number = Fraction(Decimal(m.group("num")))
        if m.group("sign") == "-":
            number = -number
        suffix = m.group("suffix") or ""
        if suffix in BINARY_SUFFIXES:
            return cls(number * (1024 ** BINARY_SUFFIXES[suffix]), BINARY_SI)
        if suffix[:1] in ("e", "E"):
            return cls(number * Fraction(10) ** int(suffix[1:]), DECIMAL_EXPONENT)
        return cls(number * Fraction(10) ** DECIMAL_SUFFIXES[suffix], DECIMAL_SI)

    @classmethod
    def of(cls, value: int | Fraction, fmt: str = DECIMAL_SI) -> "Quantity":
        return cls(Fraction(value), fmt)

    # -- arithmetic -----------------------------------------------------------
    def __add__(self, other: "Quantity") -> "Quantity":
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: "Quantity") -> "Quantity":
        return Quantity(self.value - other.value, self.format)

    def __mul__(self, n: int) -> "Quantity":
        return Quantity(self.value * n, self.format)

    def __lt__(self, other: "Quantity") -> bool:
        return self.value < other.value

    def __le__(self, other: "Quantity") -> bool:
        return self.value <= other.value

    def is_zero(self) -> bool:
        return self.value == 0

    # -- printing ------------------------------------------------------------
    def __str__(self) -> str:
        return format_quantity(self.value, self.format)

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _decimal_canonical(value: Fraction) -> str:
    """Largest power-of-1000 suffix (n .. E) keeping the mantissa whole."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == 0:
        return "0"
    # Kubernetes rounds up to nano precision when the value is finer than that.
    nanos = value * 10**9
    if nanos.denominator != 1:
        nanos = Fraction(-(-nanos.numerator // nanos.denominator))
    n = int(nanos)
    exp = -9
    while n % 1000 == 0 and exp < 18:
        n //= 1000
        exp += 3
    suffix = {v: k for k, v in DECIMAL_SUFFIXES.items()}[exp]
    return f"{sign}{n}{suffix}"


def format_quantity(value: Fraction, fmt: str = DECIMAL_SI) -> str:
    if fmt == BINARY_SI:
        whole = value.denominator == 1
        if -1024 < value < 1024 or not whole:
            return _decimal_canonical(value)
        sign = "-" if value < 0 else ""
        n = abs(int(value))
        exp = 0
        while n % 1024 == 0 and exp < 6:
            n //= 1024
            exp += 1
        suffix = {v: k for k, v in BINARY_SUFFIXES.items()}.get(exp, "")
        return f"{sign}{n}{suffix}"
    if fmt == DECIMAL_EXPONENT:
        if value == 0:
            return "0"
        sign = "-" if value < 0 else ""
        v = abs(value)
        nanos = v * 10**9
        if nanos.denominator != 1:
            nanos = Fraction(-(-nanos.numerator // nanos.denominator))
        n, exp = int(nanos), -9
        while n % 1000 == 0:
            n //= 1000
            exp += 3
        return f"{sign}{n}" + (f"e{exp}" if exp else "")
    return _decimal_canonical(value)


# -- the engine's integer view (Kueue's resources.ResourceValue) ---------------

def is_milli_resource(resource: str) -> bool:
    return resource == "cpu"


def to_engine_int(resource: str, q: Quantity) -> int:
    """Kueue counts cpu in milli-units and everything else in whole units (rounded up)."""
    v = q.value * 1000 if is_milli_resource(resource) else q.value
    return -((-v.numerator) // v.denominator)


def engine_int_to_quantity(resource: str, v: int) -> Quantity:
    """Kueue's resources.ResourceQuantity: the format it prints usage in."""
    if is_milli_resource(resource):
        return Quantity(Fraction(v, 1000), DECIMAL_SI)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return Quantity(Fraction(v), BINARY_SI)
    return Quantity(Fraction(v), DECIMAL_SI)


def format_engine_int(resource: str, v: int) -> str:
    return str(engine_int_to_quantity(resource, v))


def parse_engine_int(resource: str, raw: Any) -> int:
    return to_engine_int(resource, Quantity.parse(raw))
