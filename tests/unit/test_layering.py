"""The package's layers import one way (pyproject.toml, [tool.importlinter]; README, Layout): events,
errors and config know nothing of the rest; sources know no landing zone; the landing zone knows no
dump, merge or output; the command line and the Airflow plugins sit on top. Lazy imports count.

import-linter runs in its own process: its command line configures logging with `dictConfig`,
which disables every logger that exists (capture's), and the tests after it that read capture's
log through caplog then saw nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_imports_run_one_way_through_the_layers():
    result = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")])},  # as conftest's sys.path
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout
