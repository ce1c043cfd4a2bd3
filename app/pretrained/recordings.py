"""The latest forward passes and generations, kept by input, so that a click reuses them.

A page asks for one input's grid, then for one head at full resolution, one layer, one
token's rows: each is a view of the same forward pass. The recording of that pass
(:class:`.results.PretrainedAttentions`: every layer's query and key states and the mask,
layers x L x d numbers) is kept here, least recently used first out, within a byte
budget (``ATTNVIZ_RECORDING_CACHE_BYTES``), so that a head costs its own eager
attention (milliseconds) and not a forward pass (seconds for SmolLM2 at 1024 tokens).
A recording larger than the whole budget is used by its own request and not kept (so
the idle server never holds more than the budget: SmolLM2's recording at 4,096 tokens is
540 MB, over the default; its next click runs the pass again, about 6 s; raise
``ATTNVIZ_RECORDING_CACHE_BYTES`` to keep it). Generations (deterministic: greedy, or
sampled from a seed) are kept too, by their token ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Final

import torch

from .calls import AttentionRecording, WeightsRecording
from .computing import AttentionObserver
from .gradients import GradientPass, gradient_pass
from .model import PretrainedModel
from .results import Generation, PretrainedAttentions
from .tiles import spilled
from .tokens import TokenizedBatch

RECORDING_CACHE_BYTES: Final = 256 * 2**20
"""The default budget of kept recordings, in bytes (ATTNVIZ_RECORDING_CACHE_BYTES).

256 MiB: SmolLM2's recording is about 95 MB at 1024 tokens (its query and key states,
30 x 12 x 1024 x 64 float32, and the mask), so two or three inputs of that length are
kept, many short ones, and the server stays under 2 GiB at 1024 tokens with the model.
"""
KEPT_PASS_DISK_BYTES: Final = 4 * 2**30
"""The default budget of passes kept for tiles on disk, in bytes (ATTNVIZ_KEPT_PASS_DISK_BYTES).

4 GiB: SmolLM2's kept pass (float32 on the CPU) is 755 MB at 8,192 tokens, so the latest
five long inputs stay zoomable; a small 4-layer model of its width keeps 400 MB at 32,768."""
MAX_GENERATIONS: Final = 64
"""The most generations kept (their token ids only)."""
MAX_GRADIENT_PASSES: Final = 4
"""The most gradient passes kept (N x L_q x L_k relevance each: 59 MB for SmolLM2 at its
704-token bound, kilobytes for a sentence), so that every view of a page's method reuses one."""


def recording_bytes(result: PretrainedAttentions) -> int:
    """Bytes the tensors of a recording hold, its pass kept for tiles included.

    Each storage counts once: a layer-wide mask, GPT-2's query, key and value, which are
    views of one projection's output, or the query and key states a kept pass shares with
    the recording.
    """
    seen: set[int] = set()
    total = 0
    kept = [
        [call.query, call.key, call.value, call.attention_mask, *call.kwargs.values()]
        for call in result.recording.calls
    ]
    if isinstance(result.recording, WeightsRecording):  # output_attentions' weights, whole
        kept.append(list(result.recording.weights))
    if result.kept is not None:
        kept.extend(
            [layer.query, layer.key, layer.lse, layer.position_bias, layer.dense_mask]
            for layer in result.kept.layers
        )
    for tensors in kept:
        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    if result.decoder_head is not None:
        total += result.decoder_head.hidden.untyped_storage().nbytes()
    return total


def pass_key_of(key: tuple[Hashable, ...]) -> str:
    """The public name of a kept pass (its input key's SHA-256, 32 hex digits).

    What the API hands out for a pass kept for tiles (``pass_key``) and takes back to
    fetch them (POST /api/v1/models/attention/tiles); the same input on the same model
    object and device has the same name, a restarted server other names.
    """
    return hashlib.sha256(repr(key).encode()).hexdigest()[:32]


def _key(*parts: torch.Tensor | Hashable | None) -> tuple[Hashable, ...]:
    return tuple(
        (tuple(p.shape), p.numpy().tobytes()) if isinstance(p, torch.Tensor) else p for p in parts
    )


def _input_key(
    model: PretrainedModel,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    device: str,
    ablate: dict[int, tuple[int, ...]] | None,
) -> tuple[Hashable, ...]:
    """What identifies a forward pass: the model, the device, the input, the heads off.

    The input is its ids and a vision-language prompt's pixels and image grids.
    """
    images = tuple(
        (name, tuple(value.shape), hashlib.sha256(value.cpu().numpy().tobytes()).hexdigest())
        for name, value in sorted(batch.model_inputs.items())
    )
    return (
        _key(
            model.name,
            id(model),
            device,
            batch.input_ids,
            batch.token_type_ids,
            None if targets is None else targets.input_ids,
            None if not ablate else tuple(sorted(ablate.items())),
        )
        + images
    )


class RecordingCache:
    """Recordings and generations by model and input ids, within byte budgets (LRU).

    Passes kept for tiles only (:attr:`.results.PretrainedAttentions.tiles_only`) that are
    larger than the memory budget go to disk within their own budget (``disk_bytes``):
    their q, k and LSE are written once to a file in the system's temporary folder, read
    back memory-mapped (``torch.load(mmap=True)``) and the file's name removed at once, so
    the operating system pages them in as tiles read them, the idle server does not hold
    them, and nothing is left on disk once the pass is evicted or the server stops.

    Args:
        max_bytes: the memory budget (ATTNVIZ_RECORDING_CACHE_BYTES); 0 keeps nothing.
        disk_bytes: the budget of kept passes on disk (ATTNVIZ_KEPT_PASS_DISK_BYTES), for
            models on the CPU; 0 keeps none there.
    """

    def __init__(
        self, max_bytes: int = RECORDING_CACHE_BYTES, disk_bytes: int = KEPT_PASS_DISK_BYTES
    ) -> None:
        self.max_bytes = max_bytes
        self.disk_bytes = disk_bytes
        # input key -> (the pass, its bytes, whether they are on disk)
        self._recordings: OrderedDict[
            tuple[Hashable, ...], tuple[PretrainedAttentions, int, bool]
        ] = OrderedDict()
        self._generations: OrderedDict[tuple[Hashable, ...], Generation] = OrderedDict()
        self._gradients: OrderedDict[tuple[Hashable, ...], GradientPass] = OrderedDict()
        self._passes: dict[str, tuple[Hashable, ...]] = {}  # pass_key -> input key
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def resize(self, max_bytes: int, disk_bytes: int | None = None) -> None:
        """Set the budgets (0 keeps nothing; ``disk_bytes`` None keeps it) and forget everything."""
        with self._lock:
            self.max_bytes = max_bytes
            if disk_bytes is not None:
                self.disk_bytes = disk_bytes
            self._recordings.clear()
            self._passes.clear()
            self._generations.clear()
            self._gradients.clear()

    @property
    def held_bytes(self) -> tuple[int, int]:
        """Bytes of the kept passes: (in memory, on disk memory-mapped)."""
        with self._lock:
            sizes = [(size, disk) for _, size, disk in self._recordings.values()]
        return sum(s for s, d in sizes if not d), sum(s for s, d in sizes if d)

    def clear(self) -> None:
        """Forget every recording and generation."""
        self.resize(self.max_bytes)

    def run(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        device: str = "auto",
        ablate: dict[int, tuple[int, ...]] | None = None,
        states: bool = True,
        tiles: bool = False,
    ) -> PretrainedAttentions:
        """:meth:`.model.PretrainedModel.run`, or the kept recording of the same input.

        A recording is kept per input and per set of heads switched off (``ablate``).

        Args:
            states: the caller needs the recorded states (a method, the
                value states); False: a pass kept for tiles only serves it
                (:attr:`.results.PretrainedAttentions.tiles_only`: the maps, rows and views).
            tiles: (without ``states`` or ``ablate``) the caller reads the weights as tiles:
                a pass not kept yet is run kept for tiles, recording no states
                (:meth:`observed` with no observer), so that the file of a long input's
                maps is streamed tile by tile.

        Raises:
            AttentionInputError: as :meth:`.model.PretrainedModel.run`.
        """
        key = _input_key(model, batch, targets, device, ablate)
        carried = None
        with self._lock:
            kept = self._recordings.get(key)
            if kept is not None and states and kept[0].tiles_only:
                carried, kept = kept[0].kept, None  # run it again, recorded; its tiles kept on
            if kept is not None:
                self._recordings.move_to_end(key)
                self.hits += 1
                return kept[0]
            self.misses += 1
        if tiles and not states and not ablate and model.attention_path == "recorded":
            found = self.observed(
                model, batch, targets, None, device=device, record=False, keep=True, miss=False
            )
            if found.kept is not None and found.kept.exact:
                return found  # else a layer tiles do not reproduce: recorded, as without
        result = model.run(batch, targets, device=device, ablate=ablate)
        if carried is not None:  # the zoom of the same input goes on (its pass_key stays)
            result = dataclasses.replace(result, kept=carried)
        with self._lock:
            self._keep(key, result, recording_bytes(result))
        return result

    def kept(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        device: str = "auto",
        states: bool = False,
    ) -> PretrainedAttentions | None:
        """The kept recording of this input (no heads switched off), or None.

        ``states``: only a recording with the states (not a pass kept for tiles only), as
        :meth:`run` takes it.
        """
        key = _input_key(model, batch, targets, device, None)
        with self._lock:
            kept = self._recordings.get(key)
            if kept is None or (states and kept[0].tiles_only):
                return None
            self._recordings.move_to_end(key)
            self.hits += 1
            return kept[0]

    def observed(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None,
        observer: AttentionObserver | None,
        *,
        device: str = "auto",
        record: bool = True,
        keep: bool = False,
        miss: bool = True,
    ) -> PretrainedAttentions:
        """:meth:`.model.PretrainedModel.run` with ``observer``, kept as :meth:`run` keeps it.

        ``miss``: count the pass as a cache miss (False: :meth:`run` counted it).

        ``record`` False (a recording larger than the budget would not be kept) records
        no states. ``keep`` keeps the pass for tiles (q, k and each row's LSE,
        :mod:`.tiles`), so that the next view of the same input (a head, a layer, a
        token's rows) runs no forward pass; a kept pass with a layer tiles do not
        reproduce is not kept without its recording. A recorded pass whose states and tiles
        together are over the memory budget is kept as its tiles alone (the returned result
        too: its views read tiles).

        Raises:
            AttentionInputError: as :meth:`.model.PretrainedModel.run`.
        """
        result = model.run(
            batch, targets, device=device, observer=observer, record=record, keep=keep
        )
        if result.kept is not None and not result.kept.exact and not record:
            return result
        if not (record or keep):
            return result
        size = recording_bytes(result)
        exact = result.kept is not None and result.kept.exact
        if size > self.max_bytes and exact and result.recording.calls:
            # The states with the tiles are over the budget: the tiles alone (q, k and the
            # LSE, no value states) are smaller, and serve the zoom and every plain view.
            result = dataclasses.replace(result, recording=AttentionRecording())
            size = recording_bytes(result)
        on_disk = (
            size > self.max_bytes
            and 0 < size <= self.disk_bytes
            and result.tiles_only
            and result.device == "cpu"
        )
        if on_disk:  # outside the lock: the file is written and mapped (a second or two)
            assert result.kept is not None
            result = dataclasses.replace(result, kept=spilled(result.kept))
        with self._lock:
            self.misses += int(miss)
            self._keep(_input_key(model, batch, targets, device, None), result, size, on_disk)
        return result

    def _keep(
        self,
        key: tuple[Hashable, ...],
        result: PretrainedAttentions,
        size: int,
        on_disk: bool = False,
    ) -> None:
        """Keep ``result`` under ``key`` if it fits its budget, least recent out (lock held)."""
        if not 0 < size <= (self.disk_bytes if on_disk else self.max_bytes):
            return
        self._recordings.pop(key, None)  # a pass kept again: newest, and named anew below
        self._passes.pop(pass_key_of(key), None)
        self._recordings[key] = (result, size, on_disk)
        if result.kept is not None and result.kept.exact:
            self._passes[pass_key_of(key)] = key
        for where, budget in ((False, self.max_bytes), (True, self.disk_bytes)):
            kept = [k for k, (_, _, disk) in self._recordings.items() if disk == where]
            total = sum(self._recordings[k][1] for k in kept)
            for gone in kept:  # least recent first
                if total <= budget:
                    break
                total -= self._recordings.pop(gone)[1]
                self._passes.pop(pass_key_of(gone), None)

    def pass_key(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        device: str = "auto",
    ) -> str | None:
        """The name of this input's pass while it is kept for tiles here, else None."""
        key = _input_key(model, batch, targets, device, None)
        name = pass_key_of(key)
        with self._lock:
            return name if self._passes.get(name) == key and key in self._recordings else None

    def by_pass_key(self, name: str) -> tuple[str, PretrainedAttentions] | None:
        """The model's name and the pass kept for tiles under ``name`` (:meth:`pass_key`).

        None once the pass was evicted (or was never kept here).
        """
        with self._lock:
            key = self._passes.get(name)
            kept = None if key is None else self._recordings.get(key)
            if key is None or kept is None:
                return None
            self._recordings.move_to_end(key)
            self.hits += 1
            return str(key[0]), kept[0]

    def gradients(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        targets: TokenizedBatch | None = None,
        *,
        position: int | None = None,
        token_id: int | None = None,
        device: str = "auto",
        ablate: dict[int, tuple[int, ...]] | None = None,
    ) -> GradientPass:
        """:func:`.gradients.gradient_pass`, or the kept pass of the same input and target.

        Kept while the byte budget is above 0, the latest :data:`MAX_GRADIENT_PASSES`.

        Raises:
            AttentionInputError: as :func:`.gradients.gradient_pass`.
        """
        key = (*_input_key(model, batch, targets, device, ablate), position, token_id)
        with self._lock:
            if key in self._gradients:
                self._gradients.move_to_end(key)
                return self._gradients[key]
        result = gradient_pass(
            model, batch, targets, position=position, token_id=token_id, device=device,
            ablate=ablate,
        )  # fmt: skip
        with self._lock:
            if self.max_bytes > 0:
                self._gradients[key] = result
                while len(self._gradients) > MAX_GRADIENT_PASSES:
                    self._gradients.popitem(last=False)
        return result

    def generate(
        self,
        model: PretrainedModel,
        batch: TokenizedBatch,
        max_new_tokens: int,
        *,
        temperature: float,
        seed: int,
        device: str = "auto",
        record_pass: bool = True,
    ) -> Generation:
        """:meth:`.model.PretrainedModel.generate`, or the kept generation of the same prompt.

        The steps are not recorded one by one (``record_steps=False``). With
        ``record_pass``, generating records, as it goes, the one causal pass over prompt +
        new tokens, returned in the generation's ``result`` and kept here as :meth:`run`
        keeps passes, so the maps of a generated text cost no second forward pass;
        without it nothing is recorded (the caller runs one observed pass after, the
        streamed grid). A kept generation (a repeated request) has no ``result``:
        :meth:`run` gives its pass.

        Raises:
            AttentionInputError: as :meth:`.model.PretrainedModel.generate`.
        """
        key = _key(
            model.name, id(model), device, batch.input_ids, max_new_tokens, temperature, seed
        )
        with self._lock:
            if key in self._generations:
                self._generations.move_to_end(key)
                return self._generations[key]
        generation = model.generate(
            batch,
            max_new_tokens,
            temperature=temperature,
            seed=seed,
            device=device,
            record_steps=False,
            record_pass=record_pass,
        )
        result = generation.result
        with self._lock:
            self._generations[key] = dataclasses.replace(generation, result=None)
            if result is not None:  # the recorded pass of prompt + new tokens, kept as run()'s
                recorded = _input_key(model, result.batch, None, device, None)
                self._keep(recorded, result, recording_bytes(result))
            while len(self._generations) > MAX_GENERATIONS:
                self._generations.popitem(last=False)
        return generation


RECORDINGS = RecordingCache()
"""The process-wide cache, sized by :func:`attnviz.server.main.lifespan`."""
