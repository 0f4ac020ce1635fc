"""An iterator run in a thread a few items ahead of its consumer."""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar, cast

T = TypeVar("T")
_END = object()


def ahead(items: Iterable[T], depth: int = 2) -> Generator[T, None, None]:
    """``items``, produced in a thread up to ``depth`` ahead of the consumer.

    For work that releases the GIL on one side: building the next batches overlaps
    Arrow's Parquet encoding of the last ones (``store.write_batches``); zlib inflates
    the next blocks of a gzip stream while the last ones are decoded
    (``readers.jsonstream``). Items come in order (one thread takes them, one at a time);
    an error in the producer is raised here, after every item before it; closing the
    consumer stops the producer.
    """
    it = iter(items)
    pool = ThreadPoolExecutor(1, thread_name_prefix="neurontrace-batches")
    try:
        pending: deque[Future[object]] = deque(pool.submit(next, it, _END) for _ in range(depth))
        while (item := pending.popleft().result()) is not _END:
            pending.append(pool.submit(next, it, _END))
            yield cast(T, item)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
