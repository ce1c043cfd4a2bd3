"""Helpers shared by the tests (and the benchmarks): nothing here is a test."""
