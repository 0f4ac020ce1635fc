"""Work run a few items ahead in a thread keeps order, errors and early stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from neurontrace.io.ahead import ahead


def _items(n: int, fail_at: int | None = None) -> Iterator[int]:
    for i in range(n):
        if i == fail_at:
            raise ValueError(f"item {i}")
        yield i


def test_items_come_in_order() -> None:
    assert list(ahead(_items(100), depth=3)) == list(range(100))


def test_an_error_comes_after_every_item_before_it() -> None:
    got: list[int] = []
    with pytest.raises(ValueError, match="item 7"):
        for i in ahead(_items(20, fail_at=7)):
            got.append(i)
    assert got == list(range(7))


def test_closing_the_consumer_stops_the_producer() -> None:
    produced: list[int] = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    before = set(threading.enumerate())
    it = ahead(endless(), depth=2)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    (producer,) = set(threading.enumerate()) - before  # blocked: the queue is full
    it.close()
    assert not producer.is_alive()  # the producer's thread has ended
    assert len(produced) <= 5 + 2 + 1  # it ran at most depth (and one) ahead
