#!/usr/bin/env bash
# Set up, then run the whole pipeline on local defaults: a private MariaDB, the capture
# service, a few writes, and what landed. See scripts/quickstart.py --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh
exec .venv/bin/python scripts/quickstart.py "$@"
