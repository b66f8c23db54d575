"""The one LRU cache helper: bounded by items and by bytes, recency on get, oversize values not kept."""

import threading

import numpy as np

from medvlm_audit.cache import LRU, nbytes


def test_lru_evicts_least_recent_by_items_and_bytes() -> None:
    c = LRU(max_items=2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # a is now the most recent
    c.put("c", 3)
    assert c.get("b") is None and c.get("a") == 1 and c.get("c") == 3
    b = LRU(max_bytes=100)
    b.put("x", b"x" * 60)
    b.put("y", b"y" * 30)
    b.put("z", b"z" * 30)  # 120 > 100: x (least recent) goes
    assert b.peek("x") is None and b.nbytes == 60 and len(b) == 2
    b.put("big", b"0" * 101)  # larger than the whole budget: not kept, nothing evicted
    assert b.peek("big") is None and len(b) == 2
    assert nbytes((np.zeros(10, np.uint8), b"abc")) == 13


def test_lru_keeps_the_first_value_unless_replaced_and_is_thread_safe() -> None:
    c = LRU(max_bytes=10_000)
    c.put("k", b"one")
    c.put("k", b"two")
    assert c.get("k") == b"one"
    c.put("k", b"three", replace=True)
    assert c.get("k") == b"three" and c.nbytes == 5

    def work(i: int) -> None:
        for j in range(200):
            c.put((i, j % 50), bytes(20))
            c.get((i, (j + 7) % 50))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert c.nbytes == sum(nbytes(c.peek(k)) for k in list(c._d)) and c.nbytes <= 10_000
