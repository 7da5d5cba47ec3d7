"""A model that tries to get out of its sandbox (tests/e2e/test_hostile_code.py ships this folder,
with examples/own-model's wavesort, as a job's code archive)."""
