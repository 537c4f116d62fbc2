#!/usr/bin/env bash
# THE test command: set up (scripts/setup.sh), lint, then run the whole test suite.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m unit` or `scripts/test.sh -k landing -x`.
# The tests run on LOGTIDE_TEST_WORKERS (default 2) pytest-xdist workers, each test file whole on one
# worker (README, Tests); `scripts/test.sh -n 0` runs them in this one process.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh
echo "test: ruff check ."
ruff_rc=0
.venv/bin/ruff check . || ruff_rc=$?
# the tests run even when lint fails, so one run reports both; either failing fails the run
workers=(-n "${LOGTIDE_TEST_WORKERS:-2}" --dist loadgroup)
echo "test: pytest -q ${workers[*]} $*"
.venv/bin/python -m pytest -q --durations=30 "${workers[@]}" "$@"
if [ "$ruff_rc" -ne 0 ]; then
    echo "test: the tests passed, but ruff check failed (exit $ruff_rc): see its findings above" >&2
    exit "$ruff_rc"
fi
