"""`logtide_dump`: a watermark dump on demand, triggered with params from the Airflow UI or API.

See plugins/logtide_airflow/dag_factory.py for the graph and README "Dumps from Airflow".
"""

from __future__ import annotations

from logtide_airflow.dag_factory import build_dump_dag, parse_time_config

config = parse_time_config(__file__)
if config is not None:
    build_dump_dag(
        "logtide_dump",
        sorted(config.sources),
        description="Logtide: dump tables of a source in watermark-bracketed chunks (DBLog)",
    )
