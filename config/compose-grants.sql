-- MariaDB service `mariadb` of docker-compose.yml: what the capture user of source `shop` needs.
-- Run once by the image's entrypoint (docker-entrypoint-initdb.d) when the data volume is empty,
-- after it created the user MARIADB_USER (logtide) and the database MARIADB_DATABASE (shop).
-- Reading the binlog: REPLICATION SLAVE; its position and heartbeats: BINLOG MONITOR.
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'logtide'@'%';
-- Dumps read the captured tables.
GRANT SELECT ON shop.* TO 'logtide'@'%';
-- The watermark table logtide.watermarks (created by the first dump or `logtide setup`).
CREATE DATABASE IF NOT EXISTS logtide;
GRANT ALL ON logtide.* TO 'logtide'@'%';
