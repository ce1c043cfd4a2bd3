import sys

from attnviz.server.response_cache import ENTRY_OVERHEAD_BYTES, ResponseCache


def test_the_bound_counts_keys_too() -> None:
    """A key is the whole request (up to 4 MB): it counts against the budget.

    Before, only the bodies counted, so 10,000 requests of 100 KB with 10-byte answers
    held 1 GB of keys in a "1 MB" cache.
    """
    budget = 1_000_000
    cache = ResponseCache(max_bytes=budget, max_item_bytes=budget)
    for i in range(200):
        cache.put(f"{i:08d}" + "x" * 100_000, b"{}")
    held = sum(
        sys.getsizeof(key) + sys.getsizeof(entry.body) + ENTRY_OVERHEAD_BYTES
        for key, entry in cache._cache.items()
    )
    assert held == cache.currsize() <= budget
    assert 5 <= len(cache._cache) <= 10  # about budget / 100 KB entries are kept
    assert cache.get(f"{199:08d}" + "x" * 100_000) == b"{}"  # the newest is there
    assert cache.get(f"{0:08d}" + "x" * 100_000) is None  # the oldest was evicted


def test_a_body_over_the_item_limit_or_an_off_cache_keeps_nothing() -> None:
    cache = ResponseCache(max_bytes=10_000, max_item_bytes=100)
    cache.put("k", b"x" * 101)
    assert cache.get("k") is None
    off = ResponseCache(max_bytes=0)
    off.put("k", b"{}")
    assert off.get("k") is None
