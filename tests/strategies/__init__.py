"""Hypothesis strategies and independent oracles for the property-based tests."""
