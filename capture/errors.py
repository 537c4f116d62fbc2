"""Named failures of Logtide. Each says what went wrong and what to do about it.

The capture service and the CLI turn these into a log line and a non-zero exit;
nothing is written after one is raised.
"""


class LogtideError(Exception):
    """Base of every error a user can act on."""


class ConfigError(LogtideError):
    """The configuration file is missing, malformed or fails validation."""


class PreflightError(LogtideError):
    """The source database is not set up the way capture needs (settings, grants)."""


class CheckpointPurgedError(LogtideError):
    """The log position of the checkpoint is no longer on the server."""


class PositionWentBackwardsError(LogtideError):
    """The source's log is behind the committed frontier (e.g. the binlog was reset)."""


class LandingZoneError(LogtideError):
    """The landing zone is unreadable or inconsistent with its checkpoint."""


class LockHeldError(LogtideError):
    """Another capture instance holds this source."""


class SourceConnectionError(LogtideError):
    """The source database cannot be reached; transient, retried by the service."""


class DumpInputError(LogtideError):
    """A dump request names something unusable: an unknown table, a table without a usable
    key, keys of the wrong arity or type, bad chunk settings. Nothing is written."""


def table_not_found(schema: str, table: str, spelled: str | None = None) -> DumpInputError:
    """The refusal of a table the source does not have; a name quoted as in SQL (`db`.`t`, "db"."t")
    is the likely cause when it holds quotes, so the message gives the name to write instead.
    `spelled`: the one table whose name differs from it in letter case only (names are matched
    exactly, as the catalog spells them: `public.LEDGER` is not `public.ledger`), to name instead."""
    error = f"table {schema}.{table} does not exist (or the dump user may not see it)"
    quotes = '`"'
    if any(c in quotes for c in schema + table):
        error += f"; write table names without quotes: {schema.strip(quotes)}.{table.strip(quotes)}"
    elif spelled is not None:
        error += f"; names are matched exactly, as the catalog spells them: did you mean {spelled}?"
    return DumpInputError(error)


class UnlandableKeyError(LogtideError):
    """A key column holds a value the landing zone holds only as another value (PostgreSQL: a date
    or timestamp outside 0001-01-01 .. 9999-12-31 lands as the nearest end of that range), so
    several source keys would land as one target row: capture stops before it (a dump refuses the
    table with DumpInputError) rather than merge them, unless the source sets `clamped_keys: accept`."""


class UnlandableValueError(LogtideError):
    """A column outside the key holds a value no landed column can hold (PostgreSQL: a
    multi-dimensional array in an array column, which lands as a list): capture stops before
    anything of its transaction lands (a dump refuses the table with DumpInputError), naming the
    table, column, value and the ways out."""


class DumpCancelledError(LogtideError):
    """The dump was cancelled through its control (Airflow Variable or CLI)."""


class DumpStoppedError(LogtideError):
    """The dump's runner asked it to stop (Airflow: its task was marked failed or cleared, timed
    out, or its worker is shutting down); it stopped before its next chunk and resumes when rerun
    with the same dump id."""


class WatermarkError(LogtideError):
    """The log's watermarks contradict the chunk files (HIGH without LOW, out of order)."""


class LeaseLostError(LogtideError):
    """This capture instance no longer holds its source's lease (session suspended or expired,
    lease released); it writes nothing more and waits as a standby or exits."""


class FencedError(LeaseLostError):
    """A newer leader (higher epoch) has claimed the landing zone; this instance's commit is refused."""


class CoordinationError(LogtideError):
    """The coordination service (ZooKeeper) is unusable as configured."""


class ChunkReadAgain(LogtideError):
    """A chunk's SELECT the source could not answer from the chunk's snapshot (MariaDB: a TRUNCATE
    or ALTER after the snapshot began, "Table definition has changed"): the chunk is read again
    under the same number, from a new LOW."""


class DumpClaimedError(LogtideError):
    """Another dump holds a table this dump asks for (or this dump lost its claim on it); two
    dumps of one table never run at once. Nothing was written. `holder`: the dump id holding the
    table, when its record says (an Airflow backfill run waits behind another's: operators.py)."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class UnusableTableError(DumpInputError):
    """A captured table that a dump or a merge cannot handle: no usable key (no primary key, no
    UNIQUE index on NOT NULL columns, none named in `keys`), a named key that rows share, or
    (PostgreSQL) no replica identity to publish its updates with. A command over all tables skips
    it, says so once with `reason` and `fix`, and goes on; a command that names it refuses."""

    def __init__(self, table: str, reason: str, fix: str) -> None:
        super().__init__(f"table {table} {reason}: {fix}")
        self.table, self.reason, self.fix = table, reason, fix

    def as_dict(self) -> dict[str, str]:
        return {"table": self.table, "reason": self.reason, "fix": self.fix}


class OutputError(LogtideError):
    """An output cannot go on: its enrichment hook failed or cannot be loaded. Its position stays at the
    last acknowledged message, so nothing is lost when it is started again."""


class MergeError(LogtideError):
    """The merge cannot apply what landed (unsupported type, a column that changed type, no jars)."""


class BinlogDecodeError(LogtideError):
    """A binlog event or value capture cannot decode exactly (an unknown column type, a compressed
    event, a bad checksum). Capture stops rather than land a wrong value."""


class LandingTimeoutError(LogtideError):
    """Capture did not land a dump's watermarks in time (it is probably not running): the merge
    after a dump would miss the dump's last chunks."""


class PartitionChangeError(LogtideError):
    """A partition statement moved or removed rows of a captured table without row events in the
    log (MariaDB/MySQL `ALTER TABLE ... DROP PARTITION` and the like): capture stops before it
    rather than let targets keep rows the source lost (`partition_changes: accept` goes on)."""


class TableRenameError(LogtideError):
    """A RENAME brought another table's rows under a captured name without row events in the log
    (MariaDB/MySQL `RENAME TABLE`, `ALTER TABLE ... RENAME`): capture stops before it rather than
    let targets keep the old table's rows and miss the new ones (`table_renames: accept` goes on)."""


class ColumnRewriteError(LogtideError):
    """An ALTER TABLE gave the existing rows of a captured table new values without row events in
    the log (`ADD COLUMN ... DEFAULT`, `RENAME COLUMN`, a generated column): capture stops before it
    rather than let targets show NULL where the source shows values (`column_rewrites: accept`)."""
