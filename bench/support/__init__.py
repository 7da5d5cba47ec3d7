"""What the benchmarks share: the workload, taking turns, processes and their CPU, load generators."""
