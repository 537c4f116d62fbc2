-- PostgreSQL service `postgres` of docker-compose.yml (the source `shop_pg`): the capture role, its
-- grants and the publication. Run once by the image's entrypoint (docker-entrypoint-initdb.d) with
-- psql, as the superuser, in the database POSTGRES_DB (shop), when the data volume is empty.
-- The password comes from the container's environment (psql 15's \getenv); unset, the statement
-- fails and so does the first start.
\set ON_ERROR_STOP on
\getenv logtide_password LOGTIDE_SHOP_PG_PASSWORD

-- Logical replication needs the REPLICATION attribute (pg_hba's `host all all all` line of the
-- image covers logical replication connections, which name their database).
CREATE ROLE logtide WITH LOGIN REPLICATION PASSWORD :'logtide_password';
-- The watermark schema `logtide` and its table, created by the first capture, dump or `logtide setup`.
GRANT CREATE ON DATABASE shop TO logtide;
-- Dumps read the captured tables: those there now, and those the superuser creates later (tables
-- of another owner need `ALTER DEFAULT PRIVILEGES FOR ROLE owner ...` or a GRANT of their own).
GRANT USAGE ON SCHEMA public TO logtide;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO logtide;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO logtide;
-- FOR ALL TABLES needs a superuser; capture filters with include/exclude. The name is the config's
-- sources.shop_pg.publication.
CREATE PUBLICATION logtide_shop_pg FOR ALL TABLES;
