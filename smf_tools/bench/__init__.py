"""Benchmarks: commands that print figures, each beside its baseline in the same run."""
