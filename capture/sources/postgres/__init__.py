"""PostgreSQL: logical replication with the built-in pgoutput plugin (psycopg2), watermark dumps."""
