"""The atlas over a corpus on a Ray Data actor pool (``attnviz atlas --ray``; issue 43).

The driver plans the atlas (:func:`.plan.plan_atlas`: the passes, the cache key) and
sends only pass indices: a Ray Dataset of the plan's pass indices, in batches, goes
through ``map_batches`` to a pool of ``workers`` actors (:class:`AtlasWorker`). Each actor
loads the model once (placed by its device map within the GPUs Ray gives the actor),
plans the same atlas (checked: the same key), and runs each batch of indices into an
:class:`.shards.AtlasShard`: per score, the (N, H) float64 sums and their counts, and each
head's top-k examples. The driver adds the shards as they arrive
(:meth:`.shards.AtlasShard.__add__`), so the reduction is exact and order-free: the result
is the one-process atlas of the same passes to about 1e-15 relative.

Faults: Ray Data restarts an actor whose process dies and runs its batch again
(``max_restarts=-1``, ``max_task_retries=-1``, its defaults for actor pools). A batch
counts once, whatever ran it: its output is kept only when it completes, the merge refuses
a pass counted twice, and :func:`.shards.atlas_of` a plan's pass missed or repeated.

Ray is the optional extra ``attnviz[ray]``: this module imports it only when called.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from ..model import LoadedModel
from .plan import AtlasPlan, plan_atlas
from .shards import TOP_EXAMPLES, AtlasShard, run_shard

BATCHES_PER_WORKER: Final = 8
"""Batches a worker runs at the least (load balance and the progress bar's steps)."""
MAX_BATCH_PASSES: Final = 32
"""Passes in one batch at most (what a retried failure runs again)."""


class AtlasWorker:
    """One actor of the pool: the model, loaded once, and its plan of the atlas.

    Called by Ray Data with a batch ``{"index": (B,) int64}`` of pass indices; answers
    ``{"shard": (1,) object}``, the pickled :class:`.shards.AtlasShard` of those passes.

    Args:
        load: returns the model (called once, in the actor's process).
        texts, plan_options: :func:`.plan.plan_atlas`'s texts and keyword arguments.
        key: the driver's plan key; the actor's plan must have it.
        top_k: passages kept per head and score.
        threads: torch threads in this actor (the CPUs it reserves).

    The model loads, and the plan is made, on the first batch (:attr:`plan`).

    Raises:
        RuntimeError: (on the first batch) the actor's plan differs from the driver's
            (another model or tokenizer on this node).
    """

    def __init__(
        self,
        load: Callable[[], LoadedModel],
        texts: Sequence[str],
        plan_options: dict[str, Any],
        key: str,
        top_k: int,
        threads: int,
    ) -> None:
        self._make_plan = functools.partial(self._load, load, texts, plan_options, key, threads)
        self.top_k = top_k

    @staticmethod
    def _load(
        load: Callable[[], LoadedModel],
        texts: Sequence[str],
        plan_options: dict[str, Any],
        key: str,
        threads: int,
    ) -> AtlasPlan:
        import torch

        torch.set_num_threads(threads)
        plan = plan_atlas(load(), texts, **plan_options)
        if plan.key != key:
            raise RuntimeError(
                f"this worker's atlas plan ({plan.key[:12]}) is not the driver's "
                f"({key[:12]}): another model or tokenizer on this node"
            )
        return plan

    @functools.cached_property
    def plan(self) -> AtlasPlan:
        """The actor's plan, made on the first batch (in the thread that runs batches).

        All of an actor's torch work runs in that one thread. Ray Data calls a batch in a
        thread of its own, not the thread that built the actor; had the model loaded in
        the other, the process would hold two OpenMP thread teams, and libgomp, finding
        more of its threads than CPUs, stops spin-waiting between parallel regions: with
        as many torch threads as CPUs, the passes ran about 30% slower (measured on 2
        cores, benchmarks/atlas_ray.py).
        """
        return self._make_plan()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The shard of the batch's pass indices, pickled (an object array of one)."""
        shard = run_shard(self.plan, [int(i) for i in batch["index"]], top_k=self.top_k)
        return {"shard": np.array([pickle.dumps(shard)], dtype=object)}


def batch_passes(total: int, workers: int) -> int:
    """Passes in a batch: ``total`` over ``workers`` x :data:`BATCHES_PER_WORKER`, 1 to 32."""
    return max(1, min(MAX_BATCH_PASSES, math.ceil(total / (workers * BATCHES_PER_WORKER))))


def run_on_ray(
    plan: AtlasPlan,
    load: Callable[[], LoadedModel],
    plan_options: dict[str, Any],
    *,
    workers: int = 1,
    threads: int | None = None,
    gpus: float = 0,
    top_k: int = TOP_EXAMPLES,
    progress: Callable[[int], object] | None = None,
    worker: type[AtlasWorker] = AtlasWorker,
) -> AtlasShard:
    """Every pass of ``plan`` run by a pool of ``workers`` Ray actors, merged exactly.

    Ray must be initialised (:func:`connect`). The passes go out as a Ray Dataset of their
    indices in batches of :func:`batch_passes`; each actor plans the atlas itself from
    ``load`` and ``plan_options`` (the texts are the plan's corpus), so only indices and
    the shards' sums travel.

    Args:
        plan: the driver's plan (its key checks the actors').
        load: returns the model in an actor's process (pickled by Ray: a module-level
            function or a ``functools.partial`` of one).
        plan_options: the keyword arguments that made ``plan`` (``repeat_length``,
            ``max_tokens``, ``device``, ...), less the model and texts.
        workers: actors in the pool.
        threads: torch threads (and CPUs reserved) per actor; default this machine's
            cores over ``workers``, at least 1.
        gpus: GPUs per actor (Ray sets its ``CUDA_VISIBLE_DEVICES``; the model's device
            map places it within them).
        top_k: passages kept per head and score.
        progress: called with the number of passes of each shard merged.
        worker: the actor class (a subclass injects failures in the tests).

    Returns:
        The merged :class:`.shards.AtlasShard` of every pass (:func:`.shards.atlas_of`).

    Raises:
        ValueError: ``workers`` or ``threads`` below 1; a pass counted twice.
        ray.exceptions.RayError: the pool failed beyond Ray's retries (the first error).
    """
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    if workers < 1:
        raise ValueError(f"workers: {workers} is below 1")
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    if threads < 1:
        raise ValueError(f"threads: {threads} is below 1")
    total = len(plan.passes)
    size = batch_passes(total, workers)
    context = DataContext.get_current()
    context.enable_progress_bars = False  # ours counts passes
    context.enable_operator_progress_bars = False
    context.execution_options.preserve_order = False
    indices = ray.data.from_items(
        [{"index": i} for i in range(total)], override_num_blocks=math.ceil(total / size)
    )
    shards = indices.map_batches(
        worker,
        batch_size=size,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=workers),
        num_cpus=threads,
        num_gpus=gpus,
        fn_constructor_kwargs={
            "load": load,
            "texts": list(plan.corpus.texts),
            "plan_options": plan_options,
            "key": plan.key,
            "top_k": top_k,
            "threads": threads,
        },
    )
    merged: AtlasShard | None = None
    for row in shards.iter_rows():
        part: AtlasShard = pickle.loads(row["shard"])
        merged = part if merged is None else merged + part
        if progress is not None:
            progress(len(part.passes))
    if merged is None:
        raise ValueError("the plan has no pass")
    return merged


def connect(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at ``address``, or start a local one (no dashboard).

    ``address``: "auto" (the cluster this node belongs to, ``ray start``), ``HOST:PORT``
    or ``ray://HOST:10001``; None or "" starts a local Ray of ``num_cpus`` CPUs (default
    this machine's), ended with the process. Connecting twice is a no-op.

    Raises:
        ImportError: Ray is not installed (``pip install 'attnviz[ray]'``).
        ConnectionError: no cluster at ``address``.
    """
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "--ray needs Ray: pip install 'attnviz[ray]' (ray[data,serve])"
        ) from error
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
    else:  # "local": a new Ray, never a cluster `ray start` left on this machine
        ray.init(
            address="local", num_cpus=num_cpus, include_dashboard=False,
            logging_level=logging.WARNING,
        )  # fmt: skip
