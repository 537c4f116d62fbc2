"""Spark applications of Logtide (run by spark-submit; importable for tests and benchmarks)."""
