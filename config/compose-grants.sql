-- Grants the capture user needs (run once by the MariaDB image at first start).
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'logtide'@'%';
GRANT SELECT ON shop.* TO 'logtide'@'%';
CREATE DATABASE IF NOT EXISTS logtide;
GRANT ALL ON logtide.* TO 'logtide'@'%';
