"""MySQL and MariaDB: one binlog reader for both, with its own event and row decoder
(mysql-replication supplies type constants, charsets and the JSON parser)."""
