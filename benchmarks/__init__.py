"""Benchmarks: run from the repository root, e.g. `python -m benchmarks.capture_throughput`."""
