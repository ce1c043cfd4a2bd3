"""A bounded cache of finished attention responses, keyed by the validated request.

The same request always gives the same numbers (everything is seeded), so a
repeated request, such as a class of students loading the default preset,
can be answered with the bytes computed before. Responses larger than
``ATTNVIZ_RESPONSE_CACHE_ITEM_BYTES`` are not kept; the whole cache holds at most
``ATTNVIZ_RESPONSE_CACHE_BYTES`` (0 turns it off). A hit carries the header
``X-AttnViz-Cache: hit`` and the ``compute_ms`` of the original computation.
"""

from __future__ import annotations

import threading

from cachetools import LRUCache


class ResponseCache:
    """LRU of response bodies (bytes) bounded by their total size.

    Args:
        max_bytes: total bytes kept; 0 disables the cache.
        max_item_bytes: the largest body that is kept.
    """

    def __init__(self, max_bytes: int = 64 * 2**20, max_item_bytes: int = 2**20) -> None:
        self._lock = threading.Lock()
        self.configure(max_bytes, max_item_bytes)

    def configure(self, max_bytes: int, max_item_bytes: int) -> None:
        """Set the bounds, dropping everything cached."""
        with self._lock:
            self._cache: LRUCache[str, bytes] = LRUCache(maxsize=max(max_bytes, 1), getsizeof=len)
            self.enabled = max_bytes > 0
            self.max_item_bytes = max_item_bytes

    def get(self, key: str) -> bytes | None:
        """The body cached for ``key``, or None."""
        if not self.enabled:
            return None
        with self._lock:
            return self._cache.get(key)

    def put(self, key: str, body: bytes) -> None:
        """Keep ``body`` if the cache is on and the body small enough."""
        if self.enabled and len(body) <= min(self.max_item_bytes, self._cache.maxsize):
            with self._lock:
                self._cache[key] = body


RESPONSES = ResponseCache()
"""The process-wide cache of /api/v1/attention responses."""
