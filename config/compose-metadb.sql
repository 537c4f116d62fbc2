-- PostgreSQL service `metadb` of docker-compose.yml: the platform's own state, kept apart from the
-- source databases. Run once by the image's entrypoint (docker-entrypoint-initdb.d) with psql, as
-- the superuser, when the data volume is empty. Passwords come from the container's environment
-- (psql 15's \getenv); an unset one makes the statement, and so the first start, fail.
\set ON_ERROR_STOP on
\getenv airflow_password AIRFLOW_DB_PASSWORD
\getenv iceberg_password ICEBERG_DB_PASSWORD

-- Airflow's metadata database (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN); `airflow db migrate` (service
-- airflow-init) creates its tables.
CREATE ROLE airflow WITH LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;

-- The Iceberg JDBC catalog (merge.jdbc_uri, merge.jdbc_user); Iceberg creates its tables at the
-- first merge.
CREATE ROLE iceberg WITH LOGIN PASSWORD :'iceberg_password';
CREATE DATABASE iceberg OWNER iceberg;
