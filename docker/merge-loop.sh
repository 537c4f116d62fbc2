#!/bin/sh
# The compose service `merge`: `logtide merge --source S` for every S in $LOGTIDE_MERGE_SOURCES
# (comma-separated), then a pause of $LOGTIDE_MERGE_INTERVAL_S seconds (default 60), forever.
# Each merge is a Spark application on merge.spark_master (the compose Spark cluster); it applies
# what landed since the last one exactly once, so a failed or killed run is simply repeated.
#   merge-loop.sh --health    the healthcheck: the last round ended less than an hour (plus the
#                             interval) ago and every merge in it succeeded
set -u

interval="${LOGTIDE_MERGE_INTERVAL_S:-60}"
status="${LOGTIDE_MERGE_STATUS:-/tmp/logtide-merge.status}"   # written after each round

if [ "${1:-}" = "--health" ]; then
    [ -f "$status" ] && [ "$(cat "$status")" = "failures=0" ] \
        && [ -n "$(find "$status" -mmin "-$(( (interval + 3600) / 60 ))")" ]
    exit $?
fi

sources="${LOGTIDE_MERGE_SOURCES:?set LOGTIDE_MERGE_SOURCES, e.g. shop,shop_pg}"
trap 'echo "merge-loop: stopping"; exit 0' TERM INT

while :; do
    failures=0
    for source in $(echo "$sources" | tr ',' ' '); do
        if ! logtide merge --source "$source"; then
            failures=$((failures + 1))
            echo "merge-loop: merge of source $source failed; it is retried in ${interval}s" >&2
        fi
    done
    echo "failures=$failures" >"$status.tmp" && mv "$status.tmp" "$status"
    sleep "$interval" &
    wait $!
done
