"""Logtide under Airflow: a hook (config and connection), the dump operator, runtime control
through Variables, and the factory that builds the `logtide_dump` and `logtide_backfill_*` DAGs.

The dump itself is `capture.dump.engine.DumpEngine`, the same code the CLI runs; nothing here
knows about watermarks or chunks.
"""
