"""MySQL and MariaDB: one binlog reader for both (mysql-replication)."""
