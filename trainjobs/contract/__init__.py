"""The public contract, torch-free: job spec, job document, catalog and the events between
worker and service. The API process and the worker both import it; it must never import torch."""
