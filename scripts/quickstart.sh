#!/usr/bin/env bash
# Set up, then run the whole pipeline on local defaults: a private MariaDB, the capture
# service, writes, a dump through Airflow ending with the Spark merge into Iceberg, and per
# table the source rows against the Iceberg rows. See scripts/quickstart.py --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh
exec .venv/bin/python scripts/quickstart.py "$@"
