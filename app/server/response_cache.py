"""A bounded cache of finished attention responses, keyed by the validated request.

The same request always gives the same numbers (everything is seeded), so a
repeated request, such as a class of students loading the default preset,
can be answered with the bytes computed before. Responses larger than
``ATTNVIZ_RESPONSE_CACHE_ITEM_BYTES`` are not kept; the whole cache holds at most
``ATTNVIZ_RESPONSE_CACHE_BYTES`` (0 turns it off). A hit carries the header
``X-AttnViz-Cache: hit`` and the ``compute_ms`` of the original computation.
"""

from __future__ import annotations

import sys
import threading
from typing import Final

from cachetools import LRUCache

RESPONSE_CACHE_BYTES: Final = 64 * 2**20
"""Default bytes of all cached responses (ATTNVIZ_RESPONSE_CACHE_BYTES)."""
RESPONSE_CACHE_ITEM_BYTES: Final = 2**20
"""Default bytes of the largest response kept (ATTNVIZ_RESPONSE_CACHE_ITEM_BYTES)."""
ENTRY_OVERHEAD_BYTES: Final = 256
"""The LRU's own bookkeeping per entry (dict slots, its order list, the tuple)."""


class _Entry:
    """A cached body with its key, so that the bound counts the key's bytes too."""

    __slots__ = ("body", "cost")

    def __init__(self, key: str, body: bytes) -> None:
        # A copy of exactly the body's size: orjson writes into a 16 KiB buffer and
        # shrinks it in place, so keeping its own bytes would pin the whole buffer
        # (measured: a 1 KB response then held ~16 KB of the server's memory).
        self.body = bytes(memoryview(body))
        # The key is the whole request (up to ATTNVIZ_MAX_BODY_BYTES): count it.
        self.cost = sys.getsizeof(key) + sys.getsizeof(body) + ENTRY_OVERHEAD_BYTES


def _cost(entry: _Entry) -> int:
    return entry.cost


class ResponseCache:
    """LRU of response bodies (bytes) bounded by what they cost: key, body and bookkeeping.

    Args:
        max_bytes: total bytes kept; 0 disables the cache.
        max_item_bytes: the largest body that is kept.
    """

    def __init__(
        self, max_bytes: int = RESPONSE_CACHE_BYTES, max_item_bytes: int = RESPONSE_CACHE_ITEM_BYTES
    ) -> None:
        self._lock = threading.Lock()
        self.configure(max_bytes, max_item_bytes)

    def configure(self, max_bytes: int, max_item_bytes: int) -> None:
        """Set the bounds, dropping everything cached."""
        with self._lock:
            self._cache: LRUCache[str, _Entry] = LRUCache(
                maxsize=max(max_bytes, 1), getsizeof=_cost
            )
            self.enabled = max_bytes > 0
            self.max_item_bytes = max_item_bytes

    def get(self, key: str) -> bytes | None:
        """The body cached for ``key``, or None."""
        if not self.enabled:
            return None
        with self._lock:
            entry = self._cache.get(key)
        return None if entry is None else entry.body

    def put(self, key: str, body: bytes) -> None:
        """Keep ``body`` if the cache is on and the body small enough."""
        entry = _Entry(key, body)
        if self.enabled and len(body) <= self.max_item_bytes and entry.cost <= self._cache.maxsize:
            with self._lock:
                self._cache[key] = entry

    def currsize(self) -> int:
        """Bytes held now: keys, bodies and bookkeeping."""
        with self._lock:
            return int(self._cache.currsize)


RESPONSES = ResponseCache()
"""The process-wide cache of /api/v1/attention responses."""
