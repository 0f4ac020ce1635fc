"""An iterator run in a thread a few items ahead of its consumer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterable
from contextlib import suppress
from typing import Any, TypeVar

T = TypeVar("T")


def ahead(items: Iterable[T], depth: int = 2) -> Generator[T, None, None]:
    """``items``, produced in a thread up to ``depth`` ahead of the consumer.

    For work that releases the GIL on one side: building the next batches overlaps
    Arrow's Parquet encoding of the last ones (``store.write_batches``); zlib inflates
    the next blocks of a gzip stream while the last ones are decoded
    (``readers.jsonstream``). Items come in order; an error in the producer is raised
    here, after every item before it; closing the consumer stops the producer.
    """
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                q.put((True, item))
                if stop.is_set():  # the consumer is gone
                    return
            q.put((False, None))
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            q.put((False, e))

    thread = threading.Thread(target=produce, name="neurontrace-batches", daemon=True)
    thread.start()
    try:
        while True:
            more, item = q.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # room for a put the producer waits on, until it sees stop
            with suppress(queue.Empty):
                q.get(timeout=0.1)
