"""Benchmarks: they print figures and ratios; nothing here passes or fails."""
