"""`logtide` command line: capture | relay | setup | dump | dump-control | merge | status | events."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from capture.config import CONFIG_ENV, LogtideConfig, load_config
from capture.errors import LogtideError
from capture.landing import LandingZone
from capture.log import get_logger, setup_logging

log = get_logger("logtide")


def _capture(config: LogtideConfig, args: argparse.Namespace) -> int:
    from capture.service.loop import CaptureService

    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log.info(
            "capture.stop_requested",
            signal=signal.Signals(signum).name,
            action="finishing the current commit, then exiting",
        )
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    CaptureService(config, args.source, reset=args.reset).run(stop)
    return 0


def _relay(config: LogtideConfig, args: argparse.Namespace) -> int:
    from capture.errors import ConfigError
    from capture.output.metrics import RelayMetrics
    from capture.output.relay import Relay
    from capture.output.sinks import open_output
    from capture.service.metrics import serve_metrics

    source = config.source(args.source)
    names = [n for n, o in config.outputs.items() if o.source == args.source and (not args.output or n in args.output)]
    unknown = sorted(set(args.output or ()) - set(config.outputs))
    if unknown or not names:
        raise ConfigError(f"no output {', '.join(unknown) or ''} for source {args.source!r} in the configuration")
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("relay.stop_requested", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    zone = LandingZone(config.landing.path, args.source)
    failures: list[BaseException] = []

    metrics = RelayMetrics(args.source)

    def run(name: str, relay: Relay) -> None:
        try:
            relay.run(stop)
        except BaseException as exc:
            log.error("relay.failed", output=name, error_type=type(exc).__name__, error=str(exc))
            failures.append(exc)
            stop.set()

    threads = []
    for name in names:
        output = config.outputs[name]
        sink = open_output(name, args.source, output)
        readonly = source.watermarks == "readonly"
        relay = Relay(zone, source.kind, name, output, sink, source.database, metrics, readonly)
        threads.append(threading.Thread(target=run, args=(name, relay), name=f"relay-{name}"))
        metrics.watch(name, relay, threads[-1])
    port = config.relay.metrics.port if args.metrics_port is None else args.metrics_port
    if port:
        serve_metrics(metrics, config.relay.metrics.host, port)
    log.info("relay.started", source=args.source, outputs=",".join(names), metrics_port=port)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return 0


def _dump_request(args: argparse.Namespace, config: LogtideConfig) -> Any:
    from pydantic import ValidationError

    from capture.dump.engine import DumpRequest
    from capture.errors import DumpInputError

    def parse(text: str | None, what: str) -> Any:
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError:
            raise DumpInputError(f"{what} must be JSON, e.g. '[1, 2]' or '[[1, \"a\"]]': got {text!r}") from None

    defaults = config.source(args.source).dump
    settings = {  # an option given is checked as given: 0 is refused, not read as "the default"
        "chunk_size": defaults.chunk_size if args.chunk_size is None else args.chunk_size,
        "delay_s": defaults.delay_s if args.delay is None else args.delay,
        "max_rows_per_s": defaults.max_rows_per_s if args.max_rows_per_s is None else args.max_rows_per_s,
    }
    fields = {
        "tables": args.table or [],
        "keys": parse(args.keys, "--keys"),
        "key_from": parse(args.key_from, "--from"),
        "key_to": parse(args.key_to, "--to"),
        "settings": {k: v for k, v in settings.items() if v is not None},
    }
    if args.dump_id:
        fields["dump_id"] = args.dump_id
    try:
        return DumpRequest(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
        raise DumpInputError(f"invalid dump request: {problems}") from None


def _dump(config: LogtideConfig, args: argparse.Namespace) -> int:
    from capture.dump.control import FileControl
    from capture.dump.engine import DumpEngine
    from capture.dump.progress import dump_dir
    from capture.sources import open_chunk_source

    request = _dump_request(args, config)
    zone = LandingZone(config.landing.path, args.source)
    source = open_chunk_source(args.source, config.source(args.source))
    try:
        control = FileControl(dump_dir(zone, request.dump_id) / "control.json")
        summary = DumpEngine(source, zone, control, config.coordination).run(request)
    finally:
        source.close()
    print(json.dumps(summary, indent=2))
    return 0


def _dump_control(config: LogtideConfig, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from capture.dump.control import FileControl
    from capture.dump.progress import dump_dir
    from capture.errors import DumpInputError

    config.source(args.source)
    zone = LandingZone(config.landing.path, args.source)
    folder = dump_dir(zone, args.dump_id)
    if not folder.exists():
        raise DumpInputError(f"no dump {args.dump_id!r} for source {args.source!r} under {zone.root / 'dumps'}")
    state = {"pause": "paused", "resume": "running", "cancel": "cancelled"}.get(args.action or "")
    try:
        settings = FileControl(folder / "control.json").update(
            state=state, chunk_size=args.chunk_size, delay_s=args.delay, max_rows_per_s=args.max_rows_per_s
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise DumpInputError(f"invalid setting: {problems}") from None
    print(json.dumps(settings.model_dump()))
    return 0


def _setup(config: LogtideConfig, args: argparse.Namespace) -> int:
    from capture.sources import open_chunk_source

    source = open_chunk_source(args.source, config.source(args.source))
    try:
        source.setup()
    finally:
        source.close()
    note = "watermark table ready"
    if config.source(args.source).watermarks == "readonly":
        note = "read-only watermarks: nothing to create; the server can place chunks"
    log.info("setup.done", source=args.source, note=note)
    return 0


def _status(config: LogtideConfig, args: argparse.Namespace) -> int:
    """Per source: lease, checkpoint, lag, dumps, applied frontiers (capture/status.py collects)."""
    from capture.status import collect, render

    names = [args.source] if args.source else sorted(config.sources)
    report = collect(config, names)
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    return 0


def _events(config: LogtideConfig, args: argparse.Namespace) -> int:
    from capture.events import lsn_text

    config.source(args.source)
    zone = LandingZone(config.landing.path, args.source)
    schema, _, table = args.table.partition(".")
    data = zone.read_table(schema, table)
    if data is None:
        print(f"no committed events for {args.table} in {zone.root}")
        return 0
    for row in data.slice(max(0, data.num_rows - args.limit)).to_pylist():
        print(
            json.dumps(
                {
                    "lsn": lsn_text(row["_lsn"]),
                    "op": row["_op"],
                    "txid": row["_txid"],
                    "commit_ts": row["_commit_ts"],
                    "watermark": row["_watermark"],
                    "before": row["before"],
                    "after": row["after"],
                    **({"missing": row["_missing"]} if row.get("_missing") else {}),
                },
                default=str,
                ensure_ascii=False,
            )
        )
    return 0


def _merge(config: LogtideConfig, args: argparse.Namespace) -> int:
    """spark-submit capture/merge/__main__.py with the jars of merge.jars_dir (see README, "Merge").
    The command is built by capture.merge_submit, which the Airflow DAGs use too."""
    import os
    import subprocess

    from capture.merge_submit import build_merge_submit, merge_lock, spark_submit_binary

    submit = build_merge_submit(
        config, args.source, args.table or [], config_path=args.config, master=args.master, write_archive=True
    )
    cmd = submit.command(spark_submit_binary())
    with merge_lock(config, args.source):
        log.info("merge.submit", source=args.source, master=submit.master, app=submit.application)
        returncode = subprocess.run(cmd, env={**os.environ, **submit.env}).returncode
        submit.finish(returncode)
        return returncode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logtide", description="Watermark-based change data capture (DBLog)")
    parser.add_argument("--config", help=f"YAML configuration (default: ${CONFIG_ENV})")
    commands = parser.add_subparsers(dest="command", required=True)

    capture = commands.add_parser("capture", help="run the capture service for one source until SIGTERM")
    capture.add_argument("--source", required=True)
    capture.add_argument(
        "--reset",
        action="store_true",
        help="start from the server's current position, discarding the checkpoint's; "
        "changes in between are not captured: run a full dump afterwards",
    )
    capture.set_defaults(run=_capture)

    status = commands.add_parser(
        "status", help="per source: leader, checkpoint, lag, dumps, applied frontiers of the targets"
    )
    status.add_argument("--source")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_status)

    relay = commands.add_parser(
        "relay", help="deliver the source's log and dump rows, interleaved, to its outputs until SIGTERM"
    )
    relay.add_argument("--source", required=True)
    relay.add_argument("--output", action="append", help="an output name; repeat for several; none: all of the source")
    relay.add_argument(
        "--metrics-port", type=int, help="the metrics and /health port (default: relay.metrics.port; 0: none)"
    )
    relay.set_defaults(run=_relay)

    setup = commands.add_parser("setup", help="create the watermark table on a source")
    setup.add_argument("--source", required=True)
    setup.set_defaults(run=_setup)

    def dump_settings(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--chunk-size", type=int, help="rows per chunk (default 1000)")
        parser.add_argument("--delay", type=float, help="seconds to sleep between chunks (default 0)")
        parser.add_argument("--max-rows-per-s", type=float, help="rows/s ceiling (default none)")

    dump = commands.add_parser("dump", help="dump tables in watermark-bracketed chunks (resumable by --dump-id)")
    dump.add_argument("--source", required=True)
    dump.add_argument("--table", action="append", help="database.table; repeat for several; none: all captured")
    dump.add_argument("--keys", help="JSON list of primary keys (one table), e.g. '[1, 5]' or '[[1, \"a\"]]'")
    dump.add_argument("--from", dest="key_from", help="JSON key where the range starts (inclusive)")
    dump.add_argument("--to", dest="key_to", help="JSON key where the range ends (inclusive)")
    dump.add_argument("--dump-id", help="names the dump; rerun with the same id to resume")
    dump_settings(dump)
    dump.set_defaults(run=_dump)

    control = commands.add_parser("dump-control", help="pause, resume, cancel or retune a running dump")
    control.add_argument("--source", required=True)
    control.add_argument("--dump-id", required=True)
    control.add_argument("action", nargs="?", choices=["pause", "resume", "cancel"])
    dump_settings(control)
    control.set_defaults(run=_dump_control)

    merge = commands.add_parser("merge", help="merge landed events and dump chunks into Iceberg (spark-submit)")
    merge.add_argument("--source", required=True)
    merge.add_argument("--table", action="append", help="database.table; repeat for several; none: all landed")
    merge.add_argument("--master", help="Spark master (default: merge.spark_master, local[2])")
    merge.set_defaults(run=_merge)

    events = commands.add_parser("events", help="print the last landed events of a table")
    events.add_argument("--source", required=True)
    events.add_argument("--table", required=True, help="database.table")
    events.add_argument("--limit", type=int, default=20)
    events.set_defaults(run=_events)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging()
    try:
        config = load_config(args.config, require_env=args.command in ("capture", "dump", "setup"))
        setup_logging(config.log_level)
        return args.run(config, args)
    except LogtideError as exc:
        log.error("logtide.failed", error_type=type(exc).__name__, error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
