import subprocess
import sys

import pytest
import torch
from attnviz.attention import EmbeddedAttention, LayerConfig, compute_attention
from attnviz.attention.module_cache import MODULES, ModuleCache, module_bytes
from attnviz.attention.tutorials import TUTORIAL_BATCH


def test_cached_model_equals_a_fresh_one_and_is_reused() -> None:
    MODULES.clear()
    hits = MODULES.hits
    first = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=21))
    second = compute_attention(TUTORIAL_BATCH, LayerConfig(seed=21))
    assert MODULES.hits == hits + 1
    assert torch.equal(first.attn_weights, second.attn_weights)
    fresh = EmbeddedAttention.seeded(100, 8, 2, seed=21)
    cached = EmbeddedAttention.cached(100, 8, 2, 21, torch.device("cpu"), torch.float32)
    for (name, a), (_, b) in zip(fresh.named_parameters(), cached.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_cache_is_bounded_by_bytes_and_evicts_least_recently_used() -> None:
    cache = ModuleCache(max_bytes=3 * module_bytes(EmbeddedAttention.seeded(10, 8, 2, 0)))
    built: list[int] = []

    def build(seed: int) -> EmbeddedAttention:
        built.append(seed)
        return EmbeddedAttention.seeded(10, 8, 2, seed)

    for seed in (0, 1, 2, 0, 3, 1):  # 3 fit; seed 3 evicts 1 (0 was used last)
        cache.get(seed, lambda seed=seed: build(seed))
    assert built == [0, 1, 2, 3, 1]


def test_a_module_larger_than_the_cache_is_used_but_not_kept() -> None:
    cache = ModuleCache(max_bytes=10)
    model = cache.get("big", lambda: EmbeddedAttention.seeded(10, 8, 2, 0))
    assert isinstance(model, EmbeddedAttention)
    assert cache.get("big", lambda: EmbeddedAttention.seeded(10, 8, 2, 0)) is not model


MEASURE = """
import gc, sys
from attnviz.attention import EmbeddedAttention
from attnviz.attention.module_cache import ModuleCache

def rss():
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

vocab, d_model, num_heads = map(int, sys.argv[1:])
cache = ModuleCache(max_bytes=2**40)
cache.get(-1, lambda: EmbeddedAttention.seeded(vocab, d_model, num_heads, 0))
before = rss()
for seed in range(2000):
    cache.get(seed, lambda seed=seed: EmbeddedAttention.seeded(vocab, d_model, num_heads, seed))
print(rss() - before, cache.currsize())
"""


@pytest.mark.slow  # measures memory over many entries
def test_the_cache_counts_what_an_entry_really_costs() -> None:
    """2,000 tiny distinct seeds grow the process by no more than the cache counts.

    Before, a d_model-1 entry counted 36 bytes of parameters and cost ~22 KB: the
    server grew about 30 KB per distinct request without bound.
    """
    for config in (("1", "1", "1"), ("100", "8", "2")):
        out = subprocess.run(
            [sys.executable, "-c", MEASURE, *config], capture_output=True, text=True, check=True
        ).stdout.split()
        grown, counted = int(out[0]), int(out[1])
        assert grown > 2000 * 10_000, grown  # the measurement sees the entries
        assert grown <= counted, (config, grown, counted)  # the count covers the growth
        assert counted < 2 * grown, (config, grown, counted)  # and is not wildly above
