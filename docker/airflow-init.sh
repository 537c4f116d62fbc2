#!/usr/bin/env bash
# The compose service `airflow-init`, run once before the other Airflow services start (they wait
# for it with `condition: service_completed_successfully`); every step may run again safely:
#   1. `airflow db migrate`: creates or upgrades the metadata database (PostgreSQL `airflow` on metadb);
#   2. the admin user of the UI (FAB auth manager) from $AIRFLOW_ADMIN_USER / $AIRFLOW_ADMIN_PASSWORD,
#      left as it is when it exists;
#   3. one pool per source of $LOGTIDE_CONFIG (`logtide_<source>`, `dump.pool_slots` slots).
set -euo pipefail

: "${LOGTIDE_CONFIG:?LOGTIDE_CONFIG must name the Logtide config file}"
: "${AIRFLOW_ADMIN_USER:?set AIRFLOW_ADMIN_USER}"
: "${AIRFLOW_ADMIN_PASSWORD:?set AIRFLOW_ADMIN_PASSWORD}"

airflow db migrate

# FAB's `users create` leaves an existing user as it is ("... already exist in the db").
airflow users create --role Admin --username "$AIRFLOW_ADMIN_USER" --password "$AIRFLOW_ADMIN_PASSWORD" \
    --firstname Logtide --lastname Admin --email "${AIRFLOW_ADMIN_EMAIL:-admin@example.invalid}"

python /opt/logtide/docker/airflow_pools.py "$LOGTIDE_CONFIG" | while read -r pool slots; do
    airflow pools set "$pool" "$slots" "Logtide dumps of source ${pool#logtide_} (sources.${pool#logtide_}.dump.pool_slots)"
done
echo "airflow-init: done"
