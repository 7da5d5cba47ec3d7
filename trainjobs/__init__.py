"""trainjobs: a REST training-job service for PyTorch.

This package holds what both sides share and nothing that imports torch: the public contract
(`trainjobs.contract`), the settings, the HTTP client and the command line.
"""
