"""A bounded LRU cache of seeded modules, so that a request does not rebuild them.

Building nn.Embedding and the linear layers and drawing their parameters costs
more than the forward pass at tutorial sizes. Modules are cached per full
configuration (class, sizes, seed, device, dtype), bounded by what each entry
really costs: its parameters' bytes plus the Python and allocator footprint of its
module objects (measured: about 21.7 KB for one embedding + attention layer, whatever
its size, so that thousands of tiny distinct seeds cannot grow the server past the
budget). A cached module is only ever run under ``torch.inference_mode()``,
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

MODULE_OVERHEAD_BYTES = 3200
"""Host memory one nn.Module object costs beyond its tensors' data (its __dict__,
parameter and hook dicts, the tensor objects). Measured with RSS over 3,000 seeded
EmbeddedAttentions (7 modules, 9 tensors each): 21.4-21.9 KB each beyond the parameter
bytes, at every size from d_model 1 to 64; 7 x 3200 = 22.4 KB covers it
(tests/attention/test_cache.py measures it again)."""

_ALLOCATION_BYTES = 64
"""Tensor data is allocated in 64-byte aligned blocks."""


def module_bytes(module: nn.Module) -> int:
    """Bytes one cached module costs: tensor data plus module overhead.

    Each parameter's and buffer's data rounded up to the 64-byte allocation, plus
    :data:`MODULE_OVERHEAD_BYTES` for every module in the tree (the module itself
    included). Host memory; a CUDA module's tensors are counted the same way.
    """
    tensors = [*module.parameters(), *module.buffers()]
    data = sum(-(-t.numel() * t.element_size() // _ALLOCATION_BYTES) for t in tensors)
    return data * _ALLOCATION_BYTES + MODULE_OVERHEAD_BYTES * sum(1 for _ in module.modules())


class ModuleCache:
    """LRU cache of modules bounded by their total bytes.

    Args:
        max_bytes: the most bytes kept, as :func:`module_bytes` counts them; a
            module larger than this is built and used but not kept.
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

    def currsize(self) -> int:
        """Bytes held now, as :func:`module_bytes` counts them."""
        with self._lock:
            return int(self._cache.currsize)

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
