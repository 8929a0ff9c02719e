"""Hammer an embedded broker from several processes and count the failures.

The demo's processes share one embedded broker: the web server publishes (judge runs, reports),
the embedded beat publishes its periodic tasks, the worker consumes. kombu's filesystem
transport writes a message file in two steps (create empty, then lock and write) while the
consumer renames and reads it without the lock, so a consumer can read an empty file:
`JSONDecodeError('Expecting value: line 1 column 1 (char 0)')` in `_get`, which Celery treats as
unrecoverable (kombu #1551; issue 26). Its exchange tables have the same create-then-write gap.

This script runs PRODUCERS processes that publish (reconnecting and re-declaring every few
messages, as short-lived web requests do) and CONSUMERS processes that fetch, for SECONDS,
against the transport chosen by --transport, and prints one JSON line:
{"transport", "published", "consumed", "errors", "first_error", "seconds"}.

    .venv/bin/python bench/broker_race.py --transport filesystem --seconds 10
    .venv/bin/python bench/broker_race.py --transport embedded --seconds 10

`embedded` is what reviewhub/settings.py configures for the embedded default.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue as queue_mod
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUEUE = "hammer"
#: Bytes of padding per message: a larger write leaves the half-written file visible longer.
PAD = 16_384


def broker_for(transport: str, var_dir: Path) -> tuple[str, dict[str, Any]]:
    """The URL and transport options of `transport` with its files under `var_dir`."""
    if transport == "filesystem":
        # The configuration the embedded default used until issue 26.
        folders = {name: var_dir / "broker" / name for name in ("queue", "processed", "control")}
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        return "filesystem://", {
            "control_folder": str(folders["control"]),
            "data_folder_in": str(folders["queue"]),
            "data_folder_out": str(folders["queue"]),
            "processed_folder": str(folders["processed"]),
            "store_processed": False,
            # Consumers ask again at once when a queue is empty, as a busy worker does: the
            # race shows in seconds instead of minutes.
            "polling_interval": 0.0,
        }
    if transport == "embedded":
        from reviewhub.embedded_broker import broker_settings

        return broker_settings(var_dir, queues=(QUEUE,))
    raise SystemExit(f"unknown transport {transport!r}")


def _ready(url: str, options: dict[str, Any], ready: Any, go: Any, seconds: float) -> float:
    """Import and connect once, then start with the others: the end time."""
    from kombu import Connection

    with Connection(url, transport_options=options) as conn:
        conn.default_channel  # noqa: B018 - opens the transport (imports, engine)
    ready.put(1)
    go.wait()
    return time.time() + seconds


def _producer(url: str, options: dict[str, Any], seconds: float, results: Any, ready: Any,
              go: Any) -> None:
    from kombu import Connection

    published, error = 0, None
    try:
        stop_at = _ready(url, options, ready, go, seconds)
        while time.time() < stop_at:
            # A new connection and declaration every few messages, as each web request and
            # each beat tick does: the exchange tables are written again each time.
            with Connection(url, transport_options=options) as conn:
                q = conn.SimpleQueue(QUEUE)
                for _ in range(5):
                    q.put({"n": published, "pad": "x" * PAD})
                    published += 1
                q.close()
    except Exception as exc:
        error = f"producer: {exc!r}\n{traceback.format_exc(limit=4)}"
    results.put(("producer", published, error))


def _consumer(url: str, options: dict[str, Any], seconds: float, results: Any, ready: Any,
              go: Any) -> None:
    from kombu import Connection

    consumed, error = 0, None
    try:
        stop_at = _ready(url, options, ready, go, seconds)
        with Connection(url, transport_options=options) as conn:
            q = conn.SimpleQueue(QUEUE)
            # Drain a little past the producers' end so that every message is counted.
            while time.time() < stop_at + 3:
                try:
                    message = q.get(block=True, timeout=0.2)
                except queue_mod.Empty:
                    if time.time() >= stop_at:
                        break
                    continue
                message.ack()
                consumed += 1
            q.close()
    except Exception as exc:
        error = f"consumer: {exc!r}\n{traceback.format_exc(limit=4)}"
    results.put(("consumer", consumed, error))


def hammer(transport: str, *, seconds: float, producers: int = 3, consumers: int = 2,
           var_dir: Path | None = None) -> dict[str, Any]:
    """Run the producers and consumers for `seconds`; the counts and the first error."""
    with tempfile.TemporaryDirectory(prefix="broker-race-") as tmp:
        url, options = broker_for(transport, var_dir or Path(tmp))
        ctx = mp.get_context("spawn")
        results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        args = (url, options, seconds, results, ready, go)
        procs = [ctx.Process(target=_producer, args=args) for _ in range(producers)]
        procs += [ctx.Process(target=_consumer, args=args) for _ in range(consumers)]
        for p in procs:
            p.start()
        # The clock starts when every process has imported and connected (a loaded machine
        # takes seconds to start them), so that all of them hammer for the whole time.
        for _ in procs:
            ready.get(timeout=120)
        started = time.perf_counter()
        go.set()
        outcomes = [results.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        errors = [err for _, _, err in outcomes if err]
        return {
            "transport": transport,
            "published": sum(n for kind, n, _ in outcomes if kind == "producer"),
            "consumed": sum(n for kind, n, _ in outcomes if kind == "consumer"),
            "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "seconds": round(time.perf_counter() - started, 1),
            "producers": producers,
            "consumers": consumers,
        }


def consume_during_a_write(var_dir: Path | None = None) -> dict[str, Any]:
    """The same race without luck: the producer is held between its create and its write (where
    the scheduler stops it by chance under load) while a consumer fetches from the queue.

    The real `_put` and `_get` run; only the moment is chosen, by wrapping the transport's
    `lock`, which `_put` calls between `open(..., "wb")` and `write`. The hammer above shows
    the race happens on its own; this shows deterministically what a consumer then reads.
    """
    from kombu import Connection
    from kombu.transport import filesystem

    seen: dict[str, Any] = {"consumer_ran": False, "error": None}
    with tempfile.TemporaryDirectory(prefix="broker-race-") as tmp:
        url, options = broker_for("filesystem", var_dir or Path(tmp))
        with Connection(url, transport_options=options) as producer, \
                Connection(url, transport_options=options) as consumer:
            outbox, inbox = producer.SimpleQueue(QUEUE), consumer.SimpleQueue(QUEUE)
            real_lock = filesystem.lock

            def lock_then_consume(file: Any, flags: int) -> None:
                # Only the message file of our queue, only once: the exchange tables take
                # the same lock and are not what this shows.
                if str(getattr(file, "name", "")).endswith(f".{QUEUE}.msg") \
                        and not seen["consumer_ran"]:
                    seen["consumer_ran"] = True
                    try:
                        inbox.get(block=False).ack()
                    except Exception as exc:  # what the consumer meets is the result
                        seen["error"] = repr(exc)
                real_lock(file, flags)

            filesystem.lock = lock_then_consume
            try:
                outbox.put({"n": 0, "pad": "x" * PAD})
            finally:
                filesystem.lock = real_lock
            outbox.close()
            inbox.close()
    return {"transport": "filesystem", **seen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transport", choices=["filesystem", "embedded"], default="embedded")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(hammer(args.transport, seconds=args.seconds, producers=args.producers,
                            consumers=args.consumers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
