"""The Spark merge of the landing zone into Apache Iceberg, run by spark-submit (`logtide merge`,
the Airflow DAGs): app.py runs a source (`run_merge`, `main`; __main__.py is the file submitted),
table.py merges one table, with plan.py (its chunks and completed dumps, no Spark), iceberg.py,
spark_types.py, pruning.py (the MERGE's key filter) and failures.py; session.py builds the Spark
session, key_changes.py completes PostgreSQL key changes. Importing this package imports neither Spark nor pyarrow."""
