"""Watermark-bracketed dumps (DBLog's chunk loop), used by the CLI and by Airflow."""
