"""Print the Airflow pools the Logtide DAGs need, one `name slots` line per source of the config.

Run by docker/airflow-init.sh (compose service `airflow-init`) before the scheduler starts: a dump
task in a missing pool would wait forever. The names come from the DAG factory itself
(`logtide_<source>`), the slots from the config's `sources.<name>.dump.pool_slots`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "plugins"):  # the project checkout and the Airflow plugins folder
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from capture.config import LogtideConfig, load_config  # noqa: E402


def pools(config: LogtideConfig) -> dict[str, int]:
    """Pool name -> slots for every source of `config`."""
    from logtide_airflow.dag_factory import pool_name

    return {pool_name(name): source.dump.pool_slots for name, source in sorted(config.sources.items())}


def main(argv: list[str]) -> int:
    config = load_config(argv[1] if len(argv) > 1 else None, require_env=False)
    for name, slots in pools(config).items():
        print(name, slots)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
