from fractions import Fraction

import pytest

from gpuqueue.api.quantity import Quantity, QuantityError, format_engine_int, parse_engine_int


@pytest.mark.parametrize("raw, canonical", [
    ("8", "8"), (8, "8"), ("512Gi", "512Gi"), ("500m", "500m"), ("1.5", "1500m"), ("0.5Gi", "512Mi"),
    ("1536Mi", "1536Mi"), ("2048Mi", "2Gi"), ("64000", "64k"), ("1e3", "1e3"), ("100Mi", "100Mi"),
    ("1000m", "1"), ("0", "0"), ("1G", "1G"), ("12e6", "12e6"),
])
def test_canonical_form(raw, canonical):
    assert str(Quantity.parse(raw)) == canonical


def test_exact_arithmetic_has_no_float_rounding():
    total = Quantity.parse("0.1") + Quantity.parse("0.2")
    assert total.value == Fraction(3, 10)
    assert str(total) == "300m"


@pytest.mark.parametrize("bad", ["abc", "1.2.3", "", "5Ki5", "--1", None, True, "1 Gi"])
def test_bad_quantities_are_refused(bad):
    with pytest.raises(QuantityError):
        Quantity.parse(bad)


def test_engine_units_follow_kueue():
    assert parse_engine_int("cpu", "500m") == 500
    assert parse_engine_int("cpu", "2") == 2000
    assert parse_engine_int("memory", "8Gi") == 8 * 1024**3
    assert parse_engine_int("nvidia.com/gpu", "0.5") == 1  # whole units, rounded up
    assert format_engine_int("cpu", 2000) == "2"
    assert format_engine_int("cpu", 1500) == "1500m"
    assert format_engine_int("memory", 8 * 1024**3) == "8Gi"
    assert format_engine_int("nvidia.com/gpu", 6) == "6"
