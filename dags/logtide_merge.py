"""`logtide_merge`: the Spark merge of each source's landing zone into Apache Iceberg, on the
config's `merge.schedule` (null: on demand only) and on demand with params (source, tables).

The merge tasks update the Assets `iceberg://<catalog_name>/<namespace>/<db>__<table>` (through
the AssetAlias `logtide_iceberg_<source>`): schedule a DAG on such an Asset to run after each
merge that changed the table. See plugins/logtide_airflow/merge_dag.py and README "Merge".
"""

from __future__ import annotations

from logtide_airflow.dag_factory import parse_time_config
from logtide_airflow.merge_dag import build_merge_dag

config = parse_time_config(__file__)
if config is not None:
    build_merge_dag("logtide_merge", sorted(config.sources), schedule=config.merge.schedule)
