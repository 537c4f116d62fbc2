"""`logtide merge` from an installed wheel, outside the checkout: the merge is part of the package
(capture/merge/), so spark-submit runs the installed package's capture/merge/__main__.py, and the
Iceberg target holds the landed rows. The wheel is built from a copy of pyproject.toml and capture/ and
installed without dependencies into a fresh venv that finds them in this venv's site-packages. Building
the wheel needs pyproject's build backend (setuptools>=68), which pip takes from its configured index."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from capture.events import Change, Lsn, Op
from tests.conftest import ROOT
from tests.spark.landing import DOCS, Landing
from tests.spark.merging import iceberg_state

pytestmark = pytest.mark.spark


def _install_wheel(tmp_path: Path) -> Path:
    """A venv with only the project's wheel of its own; its dependencies from this venv (a .pth)."""
    source = tmp_path / "src"  # build from a copy: setuptools writes build/ and egg-info beside the sources
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "capture", source / "capture", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("logtide-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True)
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # the dependencies (pyarrow, pydantic, pyspark, ...): this venv's site-packages, after the wheel's
    (site / "logtide-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_logtide_merge_runs_from_a_wheel_installed_outside_the_checkout(spark, catalogs, tmp_path):
    venv = _install_wheel(tmp_path)
    landing = Landing(tmp_path, catalogs, "installed")
    rows = [(1, "a", "x"), (2, "b", "y"), (3, "c", None)]
    landing.commit(100, DOCS, *(Change(Lsn(100, i), Op.CREATE, None, row) for i, row in enumerate(rows)))
    landing.commit(110, DOCS, Change(Lsn(110), Op.UPDATE, rows[1], (2, "b2", "y")))
    config = landing.config_file(
        spark_master="local[1]",
        spark_conf={"spark.sql.shuffle.partitions": "2"},
        # the suite's JVM class archive (README, Merge, "Start-up"), not a new one in `elsewhere`
        class_archive_dir=str(ROOT / "var" / "jvm"),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "SPARK_HOME", "LOGTIDE_CONFIG"}}
    # spark-submit: pyspark's, found on PATH (the fresh venv has none beside its Python)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [str(venv / "bin" / "logtide"), "--config", str(config), "merge", "--source", "src"]
    done = subprocess.run(
        cmd, cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300
    )
    output = done.stdout
    assert done.returncode == 0, output[-3000:]
    # spark-submit ran the installed package's entry file, not the checkout's
    app = next(line for line in output.splitlines() if "merge.submit" in line)
    assert str(venv / "lib") in app and "capture/merge/__main__.py" in app, app
    assert str(ROOT) not in app, app
    summary = json.loads(next(line for line in output.splitlines() if line.startswith("{")))
    assert summary["failed"] == [] and [t["table"] for t in summary["tables"]] == ["db.docs"], summary

    spark.catalog.refreshTable("logtide.installed.db__docs")
    assert iceberg_state(spark, "logtide.installed.db__docs") == {
        (1,): {"id": 1, "title": "a", "body": "x"},
        (2,): {"id": 2, "title": "b2", "body": "y"},
        (3,): {"id": 3, "title": "c", "body": None},
    }
