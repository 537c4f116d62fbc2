#!/bin/sh
# Entry point of the logtide image (docker-compose.yml, README "Deployment"):
#   spark-master              the Spark standalone master (foreground; RPC $SPARK_MASTER_PORT, UI $SPARK_MASTER_WEBUI_PORT)
#   spark-worker MASTER_URL   a Spark standalone worker (cores, memory: $SPARK_WORKER_CORES, $SPARK_WORKER_MEMORY)
#   merge-loop                `logtide merge` of every source in $LOGTIDE_MERGE_SOURCES, again and again
#   anything else             `logtide ARGS...` (capture, setup, dump, dump-control, merge, status, events)
set -eu

# A Spark driver (`logtide merge`) and its executors connect to each other by the address each one
# advertises. Spark's default is the container's host name, which other containers may not resolve;
# the container's IP address always works, also for `--scale spark-worker=N` and `docker compose run`.
if [ -z "${SPARK_LOCAL_HOSTNAME:-}" ]; then
    SPARK_LOCAL_HOSTNAME="$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')"
    export SPARK_LOCAL_HOSTNAME
fi

case "${1:-}" in
    spark-master)
        shift
        exec spark-class org.apache.spark.deploy.master.Master --host "$SPARK_LOCAL_HOSTNAME" \
            --port "${SPARK_MASTER_PORT:-7077}" --webui-port "${SPARK_MASTER_WEBUI_PORT:-8080}" "$@"
        ;;
    spark-worker)
        shift
        exec spark-class org.apache.spark.deploy.worker.Worker --host "$SPARK_LOCAL_HOSTNAME" \
            --webui-port "${SPARK_WORKER_WEBUI_PORT:-8081}" "$@"
        ;;
    merge-loop)
        shift
        exec /opt/logtide/docker/merge-loop.sh "$@"
        ;;
    *)
        exec logtide "$@"
        ;;
esac
