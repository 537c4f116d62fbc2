"""The Spark merge of the landing zone into Apache Iceberg, run by spark-submit (`logtide merge`,
the Airflow DAGs): app.py runs a source (`run_merge`, `main`; __main__.py is the file submitted),
table.py merges one table, session.py builds the Spark session, key_changes.py completes
PostgreSQL key changes. Importing this package imports neither Spark nor pyarrow."""
