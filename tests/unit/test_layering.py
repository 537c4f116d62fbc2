"""The package's layers import one way (pyproject.toml, [tool.importlinter]; README, Layout): events,
errors and config know nothing of the rest; sources know no landing zone; the landing zone knows no
dump, merge or output; the command line and the Airflow plugins sit on top. Lazy imports count."""

from __future__ import annotations

from pathlib import Path

import pytest
from importlinter.cli import lint_imports

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_imports_run_one_way_through_the_layers(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert status == 0, report
    assert "1 kept, 0 broken" in report
