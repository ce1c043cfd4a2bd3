"""A bounded LRU cache of seeded modules, so that a request does not rebuild them.

Building nn.Embedding and the linear layers and drawing their parameters costs
more than the forward pass at tutorial sizes. Modules are cached per full
configuration (class, sizes, seed, device, dtype), bounded by the bytes of their
parameters. A cached module is only ever run under ``torch.inference_mode()``,
never changed, so threads can share it. The same configuration gives the same
parameters whether it comes from the cache or is built anew (tested).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar, cast

from cachetools import LRUCache
from torch import nn

ModuleT = TypeVar("ModuleT", bound=nn.Module)

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


def module_bytes(module: nn.Module) -> int:
    """Bytes of the module's parameters and buffers."""
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) or 1


class ModuleCache:
    """LRU cache of modules bounded by their total bytes.

    Args:
        max_bytes: the most parameter bytes kept; a module larger than this is
            built and used but not kept.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._cache: LRUCache[Hashable, nn.Module] = LRUCache(
            maxsize=max_bytes, getsizeof=module_bytes
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable, build: Callable[[], ModuleT]) -> ModuleT:
        """The module cached under ``key``, built with ``build()`` on a miss."""
        with self._lock:
            module = self._cache.get(key)
            if module is not None:
                self.hits += 1
                return cast(ModuleT, module)
            self.misses += 1
        module = build()  # outside the lock: other requests go on meanwhile
        with self._lock:
            if module_bytes(module) <= self._cache.maxsize:
                self._cache[key] = module
        return module

    def resize(self, max_bytes: int) -> None:
        """Set the byte bound, dropping everything cached."""
        with self._lock:
            self._cache = LRUCache(maxsize=max_bytes, getsizeof=module_bytes)

    def clear(self) -> None:
        """Drop every cached module."""
        with self._lock:
            self._cache.clear()


MODULES = ModuleCache()
"""The process-wide cache used by the engine (``ATTNVIZ_MODEL_CACHE_BYTES`` sizes it)."""
