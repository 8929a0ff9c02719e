"""The embedded default's Celery broker: kombu's SQLAlchemy transport on its own SQLite file.

Why not kombu's filesystem transport (the embedded default until issue 26): it writes each
message file in two steps (create empty, then lock and write) and its consumer renames and reads
the file without taking the lock, so a worker can read an empty message and die with
`JSONDecodeError('Expecting value: line 1 column 1 (char 0)')` in `_get`, which Celery treats
as unrecoverable (kombu #1551). Its exchange tables (`<exchange>.exchange`, written by every
process that declares a queue, and the remote-control `reply.celery.pidbox.exchange`) have the
same create-then-write gap. Turning remote control off removes the pidbox files but not the
message race: the embedded beat publishes in its own process while the worker consumes.
`bench/broker_race.py` reproduces it in seconds.

The SQLAlchemy transport stores messages as rows: a publish is one INSERT transaction and a
fetch takes SQLite's write lock (`BEGIN IMMEDIATE`) before it picks and hides a row, so a
message is seen whole or not at all and by one consumer only. It has no fanout, so Celery's
remote control (pidbox), gossip and mingle stay off and no process writes shared exchange
files. Its own file keeps broker polling off the application database's lock. WAL lets
readers go on while a writer commits; the busy timeout makes concurrent writers wait rather
than fail.

Pure module: no Django import (settings call it).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

#: Seconds a connection waits for SQLite's write lock before it gives up.
BUSY_TIMEOUT_S = 30

#: The kombu tables (kombu's defaults, named here so that the pruning below names the same).
MESSAGE_TABLE = "kombu_message"
QUEUE_TABLE = "kombu_queue"


def broker_path(var_dir: Path) -> Path:
    return var_dir / "broker.sqlite3"


#: The queues the demo's worker consumes (settings: CELERY_TASK_ROUTES and the default one).
QUEUES = ("celery", "judges")


def broker_settings(var_dir: Path, *, queues: tuple[str, ...] = QUEUES
                    ) -> tuple[str, dict[str, Any]]:
    """The broker URL and transport options of the embedded default, its file made ready.

    The file is created in WAL mode here (the mode is stored in the file, so every process
    that opens it later uses it), with kombu's tables and a row for each of `queues`.
    """
    path = broker_path(var_dir)
    options: dict[str, Any] = {
        # Passed through to sqlalchemy.create_engine: sqlite3's busy timeout.
        "connect_args": {"timeout": BUSY_TIMEOUT_S},
        "queue_tablename": QUEUE_TABLE,
        "message_tablename": MESSAGE_TABLE,
        # Every other option goes to create_engine, so kombu's polling interval (an idle
        # worker asks each queue once a second) keeps its default.
    }
    url = f"sqla+sqlite:///{path}"
    if not _prepared(path, queues):
        _prepare(path, url, options, queues)
    return url, options


def _prepared(path: Path, queues: tuple[str, ...]) -> bool:
    if not path.exists():
        return False
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        tables = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
            (QUEUE_TABLE, MESSAGE_TABLE),
        ).fetchone()[0]
        if tables != 2:
            return False
        marks = ", ".join("?" for _ in queues)
        found = conn.execute(
            f"SELECT count(*) FROM {QUEUE_TABLE} WHERE name IN ({marks})", queues
        ).fetchone()[0]
        return bool(found == len(queues))
    finally:
        conn.close()


def _prepare(path: Path, url: str, options: dict[str, Any], queues: tuple[str, ...]) -> None:
    """Create the file (WAL), kombu's tables and the queues' rows once, under a file lock.

    kombu creates its tables on a process's first connection with SQLAlchemy's check-then-
    create, and a queue's row on its first use with a check-then-insert, so the demo's
    worker, beat and web starting together on a new file can fail with "table kombu_message
    already exists" or "UNIQUE constraint failed: kombu_queue.name" (bench/broker_race.py
    found both). Done here, before any of them connects, under an exclusive lock between
    processes, it happens once.
    """
    import fcntl

    from kombu import Connection

    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f"{path.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _prepared(path, queues):
                return
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
            finally:
                conn.close()
            with Connection(url, transport_options=options) as broker:
                # Declaring a queue opens kombu's engine (which creates the tables) and
                # inserts the queue's row.
                for name in queues:
                    broker.SimpleQueue(name).close()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prune_delivered(var_dir: Path, *, older_than_s: float) -> int:
    """Delete messages delivered more than `older_than_s` seconds ago; the number deleted.

    kombu's SQLAlchemy transport hides a delivered message (visible = 0) and never deletes it;
    without this the file grows all day. A message still being worked on is safe to delete:
    if its worker stops before acknowledging it, kombu publishes it again from memory.
    """
    path = broker_path(var_dir)
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=BUSY_TIMEOUT_S) as conn:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MESSAGE_TABLE,)
        ).fetchone()
        if not exists:
            return 0
        # kombu leaves `timestamp` empty on publish and stamps it (local naive time) when it
        # hides the message on delivery.
        cursor = conn.execute(
            f"DELETE FROM {MESSAGE_TABLE} WHERE visible = 0 "
            "AND timestamp < datetime('now', 'localtime', ?)",
            (f"-{int(older_than_s)} seconds",),
        )
        return int(cursor.rowcount)
