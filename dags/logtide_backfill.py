"""`logtide_backfill_<source>`: the dump of `logtide_dump` on the schedule of the config's
`sources.<name>.dump.backfill_schedule` (tables: `backfill_tables`, empty = all), no catchup.

A source without a backfill schedule gets no DAG.
"""

from __future__ import annotations

from capture.log import get_logger
from logtide_airflow.dag_factory import build_dump_dag, parse_time_config

log = get_logger(__name__)

config = parse_time_config(__file__)
if config is not None:
    scheduled = {name: s for name, s in sorted(config.sources.items()) if s.dump.backfill_schedule}
    if not scheduled:
        log.info("airflow.no_backfill", reason="no source sets dump.backfill_schedule in the config")
    for name, source in scheduled.items():
        build_dump_dag(
            f"logtide_backfill_{name}",
            [name],
            schedule=source.dump.backfill_schedule,
            source_default=name,
            tables=source.dump.backfill_tables,
            dump_id_prefix="backfill-",
            description=f"Logtide: scheduled dump of {name} ({source.dump.backfill_schedule})",
        )
