"""The spark-submit command of the merge, as `logtide merge` and the Airflow operator build it."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from capture.config import parse_config
from capture.errors import ConfigError
from capture.merge_submit import APPLICATION, build_merge_submit, merge_lock

pytestmark = pytest.mark.unit


def _config(tmp_path, **merge):
    data = {
        "landing": {"path": str(tmp_path / "landing")},
        "sources": {"shop": {"kind": "mariadb", "user": "u", "server_id": 1}},
        "merge": {"jars_dir": str(tmp_path / "jars"), **merge},
    }
    return parse_config(data)


def test_the_command_carries_jars_settings_and_the_tables(tmp_path):
    (tmp_path / "jars").mkdir()
    for name in ("b.jar", "a.jar", "notes.txt"):
        (tmp_path / "jars" / name).write_text("")
    config = _config(
        tmp_path, spark_master="local[3]", spark_conf={"spark.driver.memory": "2g"}, class_archive_dir=None
    )
    submit = build_merge_submit(config, "shop", ["shop.orders", "shop.lines"], config_path=tmp_path / "c.yaml")
    jars = f"{tmp_path / 'jars' / 'a.jar'},{tmp_path / 'jars' / 'b.jar'}"
    assert submit.command("spark-submit") == [
        "spark-submit",
        "--master",
        "local[3]",
        "--jars",
        jars,
        "--conf",
        "spark.driver.memory=2g",
        "--conf",
        "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m",
        str(APPLICATION),
        "--source",
        "shop",
        "--config",
        str(tmp_path / "c.yaml"),
        "--table",
        "shop.orders",
        "--table",
        "shop.lines",
    ]
    assert build_merge_submit(config, "shop", master="yarn").master == "yarn"


def test_the_first_local_merge_writes_the_jvm_class_archive_and_later_ones_map_it(tmp_path):
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "a.jar").write_text("")
    archives = tmp_path / "jvm"
    config = _config(tmp_path, class_archive_dir=str(archives), spark_conf={"spark.driver.extraJavaOptions": "-Xss4m"})
    assert build_merge_submit(config, "shop").archive is None  # Airflow's: uses one, never writes it

    first = build_merge_submit(config, "shop", write_archive=True)
    writing = first.archive.writing
    assert (
        first.conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m "
        f"-XX:ArchiveClassesAtExit={writing} -Xlog:cds=off,cds+dynamic=off -Xss4m"
    )
    assert first.conf["spark.driver.extraClassPath"] == str(tmp_path / "jars" / "a.jar")
    writing.write_text("a failed run's archive")
    first.finish(1)
    assert list(archives.iterdir()) == []
    writing.write_text("archive")
    first.finish(0)
    assert [p.name for p in archives.iterdir()] == [first.archive.path.name]

    later = build_merge_submit(config, "shop", write_archive=True)
    assert later.archive.writing is None
    assert f"-XX:SharedArchiveFile={first.archive.path} " in later.conf["spark.driver.extraJavaOptions"]
    (tmp_path / "jars" / "b.jar").write_text("")  # another jar: another archive
    assert build_merge_submit(config, "shop", write_archive=True).archive.writing is not None
    remote = build_merge_submit(config, "shop", master="yarn", write_archive=True)
    assert remote.archive is None and remote.conf == {"spark.driver.extraJavaOptions": "-Xss4m"}


def test_packages_replace_the_jars(tmp_path):
    config = _config(tmp_path, spark_conf={"spark.jars.packages": "org.apache.iceberg:x:1"})
    submit = build_merge_submit(config, "shop")
    assert submit.jars == [] and submit.conf == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    }
    assert submit.command("s")[:5] == ["s", "--master", "local[2]", "--packages", "org.apache.iceberg:x:1"]


def test_refusals_name_the_problem(tmp_path):
    config = _config(tmp_path)
    with pytest.raises(ConfigError, match=r"no jars in .*jars \(merge.jars_dir\): run scripts/jars.sh"):
        build_merge_submit(config, "shop")
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "a.jar").write_text("")
    with pytest.raises(ConfigError, match=r"no source named 'nope' in the configuration \(known: shop\)"):
        build_merge_submit(config, "nope")
    with pytest.raises(ConfigError, match=r"table 'orders' must be given as database\.table"):
        build_merge_submit(config, "shop", ["orders"])


def test_one_merge_of_a_source_at_a_time(tmp_path):
    import fcntl

    config = _config(tmp_path)
    with merge_lock(config, "shop"):
        lock = tmp_path / "landing" / "shop" / "merge.lock"
        with open(lock) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released


@pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH")
def test_the_local_driver_keeps_a_code_cache_for_a_long_merge(tmp_path):
    """C1 alone (`-XX:TieredStopAtLevel=1`) makes JDK 17 reserve 48 MB of code cache instead of 240 MB:
    a convergence seed's final merge (7 tables whose columns a DDL workload added, dropped, widened and
    renamed) filled it after 110 s and its driver died (`VirtualMachineError: Out of space in CodeCache
    for method handle intrinsic`), failing the merge. The JVM the merge starts keeps the usual size."""
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "a.jar").write_text("")
    config = _config(tmp_path, class_archive_dir=None)
    options = build_merge_submit(config, "shop").conf["spark.driver.extraJavaOptions"].split()
    flags = subprocess.run(
        ["java", *options, "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True
    ).stdout
    reserved = int(re.search(r"\bReservedCodeCacheSize\s*=\s*(\d+)", flags).group(1))
    assert reserved >= 240 * 1024 * 1024, f"{reserved // 2**20} MB of code cache"
