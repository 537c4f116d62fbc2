"""The soak: N seeds of the convergence harness at a larger scale, one result line per seed.

    .venv/bin/python -m tests.convergence --source mariadb --seeds 10 --rows 10000
    .venv/bin/python -m tests.convergence --source postgres --seeds 3 --first-seed 20 --dumps 1
    .venv/bin/python -m tests.convergence --source both --seeds 2 --ddl   # the workload alters tables too

Private servers (tests/servers.py) and a local Spark session are started here and stopped at the end.
Exit code 1 when any seed found a divergence; its findings and its folder are printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from capture.config import MergeConfig
from tests.conftest import ROOT
from tests.convergence.harness import KITS, SOAK, Harness
from tests.servers import MariaDB, PostgreSQL

CATALOG = "logtide"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.convergence", description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=[*KITS, "both"], default="both")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1)
    for name, value in dataclasses.asdict(SOAK).items():
        if isinstance(value, bool):
            parser.add_argument(f"--{name.replace('_', '-')}", action="store_true", default=value)
        elif isinstance(value, tuple):
            parser.add_argument(f"--{name.replace('_', '-')}", type=float, nargs=2, default=value)
        else:
            parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--workdir", type=Path, default=ROOT / "var" / "convergence")
    parser.add_argument("--keep", action="store_true", help="keep the folders of passing seeds too")
    args = parser.parse_args(argv)
    args.workdir = args.workdir.resolve()  # the servers run from other directories (mariadb-install-db)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanups: servers, capture, Spark
    scale = dataclasses.replace(SOAK, **{f.name: tuple(v) if isinstance(v := getattr(args, f.name), list) else v
                                         for f in dataclasses.fields(SOAK)})  # fmt: skip
    args.workdir.mkdir(parents=True, exist_ok=True)
    kinds = list(KITS) if args.source == "both" else [args.source]
    servers = {
        "mariadb": lambda: MariaDB(Path(tempfile.mkdtemp(prefix="conv-mariadb-", dir=args.workdir))),
        "postgres": lambda: PostgreSQL(Path(tempfile.mkdtemp(prefix="conv-pg-"))),  # not 0700 parents
    }
    spark = _spark(args.workdir / "warehouse")
    failed = 0
    try:
        for kind in kinds:
            server = servers[kind]()
            server.start()
            try:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    workdir = args.workdir / f"{kind}-{seed}"
                    shutil.rmtree(workdir, ignore_errors=True)
                    workdir.mkdir(parents=True)
                    kit = KITS[kind](server, f"conv_s{seed}")
                    result = Harness(kit, seed, scale, workdir, spark, args.workdir / "warehouse", CATALOG).run()
                    print(result.report() if not result.passed else result.summary(), flush=True)
                    failed += not result.passed
                    if result.passed and not args.keep:
                        shutil.rmtree(workdir, ignore_errors=True)
            finally:
                server.destroy()
    finally:
        spark.stop()
    print(f"convergence soak: {failed} of {len(kinds) * args.seeds} seeds found divergences", flush=True)
    return 1 if failed else 0


def _spark(warehouse: Path):
    from capture.merge.session import build_session, session_conf

    config = MergeConfig(catalog_name=CATALOG, warehouse=str(warehouse), jars_dir=ROOT / "var" / "jars")
    # the check collects whole changelogs into Python: a task result over 1 MB otherwise goes through
    # the block manager, which lost one under memory pressure late in a soak (TaskResultLost), so
    # results up to 64 MB come back directly and a lost task is tried again (local[2, 3])
    session = build_session(
        {**session_conf(config), "spark.sql.shuffle.partitions": "4", "spark.task.maxDirectResultSize": "64m"},
        master="local[2,3]",
        app_name="logtide-soak",
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


if __name__ == "__main__":
    sys.exit(main())
