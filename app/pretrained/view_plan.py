"""One input's view, planned then run: every check taken once, frozen, then the work.

:func:`plan_view` checks a request's one-input options against the model and the server's
limits (lengths, indices, method bounds, the response's size, the memory) and decides
which pass the view reads (a kept one, one observed while the walk runs it, one recorded
or kept for tiles); :meth:`ViewPlan.run` then generates, runs or reuses that pass and makes
the walk (:class:`.display.LayerWalk`) and the method's maps, deciding nothing more. The
head atlas has the same shape (:mod:`.atlas.plan`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from ..attention.errors import AttentionInputError
from .admission import (
    check_memory,
    check_options,
    check_positions,
    device_free_bytes,
    kept_bytes,
)
from .admission import recording_bytes as estimated_recording_bytes
from .analysis import (
    Limits,
    PreparedSequence,
    ViewOptions,
    ablated_modules,
    ablation_fields,
    check_generation_length,
    check_view_cells,
    check_view_options,
    needs_states,
    observed_pass,
)
from .blocks import Block
from .display import LayerWalk
from .lengths import InputLengths
from .maps import MAX_AVERAGE_SIZE, pooled
from .methods import MethodMaps, MethodRun, method_spec, with_method
from .model import PretrainedModel
from .recordings import RecordingCache
from .results import PassInputs
from .streaming import ProgressBudget
from .tokens import TokenizedBatch

__all__ = ["ViewPlan", "plan_view"]


@dataclass(frozen=True)
class ViewPlan:
    """One input's view with every check taken and every choice made, before anything runs.

    Made by :func:`plan_view` (lengths, indices, method bounds, the response's size and the
    memory against the limits; which pass to reuse, whether to observe, record or keep it),
    frozen, then run (:meth:`run`): nothing is checked or decided while it runs, as the
    atlas's plan (:mod:`.atlas.plan`).

    Attributes:
        model: the model.
        options: the request's options.
        block: the attention block drawn.
        recordings: where passes are reused from and kept.
        batch: the one input (B = 1), ``targets`` its decoder input or None.
        lengths: its tokens (source, target, new tokens).
        observing: the walk runs the pass itself, observed (a stream's grid).
        recorded: the observed pass records its states (they fit the recording cache).
        keep: the observed pass is kept for tiles.
        states: the view needs a recorded pass's states (:func:`needs_states`).
        tiles: the caller reads the weights as tiles (a download of the weights).
    """

    model: PretrainedModel
    options: ViewOptions
    block: Block
    recordings: RecordingCache
    batch: TokenizedBatch
    targets: TokenizedBatch | None
    lengths: InputLengths
    observing: bool
    recorded: bool
    keep: bool
    states: bool
    tiles: bool

    def run(self, *, deadline: ProgressBudget | None = None) -> PreparedSequence:
        """Generate when asked, run (or reuse) the forward pass, make the walk.

        With :attr:`observing`, no pass runs here: the walk runs it. ``deadline``
        (:class:`.streaming.ProgressBudget`): the walk stops once it ends (a stream's time
        budget), raising ComputeCancelledError with the message.

        Raises:
            AttentionInputError: a position past the generated text (query_index,
                target_index), or as :meth:`.model.PretrainedModel.run`.
            torch.OutOfMemoryError: a device ran out of memory (the server's 503).
        """
        model, options, block, recordings = self.model, self.options, self.block, self.recordings
        alone, alone_targets = self.batch, self.targets
        generation = None
        if options.max_new_tokens:
            # the new tokens come from an unrecorded, key/value-cached run (SDPA), then one
            # pass (observed or recorded while generating) covers prompt + new tokens
            generation = recordings.generate(
                model,
                alone,
                options.max_new_tokens,
                temperature=options.temperature,
                seed=options.seed,
                device=options.device,
                record_pass=not self.observing,
            )
            alone = model.extended(alone, generation.new_ids)
            check_positions(
                replace(self.lengths, new_tokens=len(generation.new_ids)),
                query_index=options.query_index,
                target_index=options.target_index,
            )
        walk_of = functools.partial(
            LayerWalk,
            block=block,
            hide_special_tokens=options.hide_special_tokens,
            layer_index=options.layer_index,
            head_index=options.head_index,
            display_size=options.display_size,
            merge_words=options.merge_words,
            deadline=deadline,
        )
        if self.observing:
            run_on = model.device_for(options.device)
            layers = {b: model.block_layers(b) for b in model.blocks}
            walk = walk_of(
                PassInputs(alone, alone_targets, layers),
                pending=observed_pass(
                    model,
                    alone,
                    alone_targets,
                    options.device,
                    recordings,
                    record=self.recorded,
                    keep=self.keep,
                ),
                block_of=model.block_of(model.on(run_on)),
            )
            return PreparedSequence(walk, None, str(run_on), generation, None)
        result = (
            generation.result
            if generation is not None and generation.result is not None
            else recordings.run(
                model,
                alone,
                alone_targets,
                device=options.device,
                states=self.states,
                tiles=self.tiles,
            )
        )
        ablation = None
        switched = None
        if options.ablate:
            intact = result
            switched = ablated_modules(intact, block, options.ablate)
            result = recordings.run(
                model, alone, alone_targets, device=options.device, ablate=switched
            )
            ablation = ablation_fields(model, options.ablate, intact, result)
        result = with_method(result, model.on(torch.device(result.device)), options.method)
        walk = walk_of(result)
        query_rows = None
        if options.query_index is not None:
            query_rows = result.query_rows(block, options.query_index)
        step = None
        if options.neuron:
            assert options.layer_index is not None and options.head_index is not None
            assert options.query_index is not None
            step = result.neuron(
                block, options.layer_index, options.head_index, options.query_index
            )
        added = MethodMaps()
        compute = method_spec(options.method).compute
        if compute is not None:
            added = compute(
                MethodRun(
                    model=model,
                    result=result,
                    block=block,
                    batch=alone,
                    targets=alone_targets,
                    recordings=recordings,
                    device=options.device,
                    ablate=switched,
                    layer_index=options.layer_index,
                    display_size=options.display_size,
                    target_index=options.target_index,
                    target_token_id=options.target_token_id,
                    pooled=lambda maps, size: pooled(maps, size)[0],
                    average_size=MAX_AVERAGE_SIZE,
                )
            )
        return PreparedSequence(
            walk,
            result,
            result.device,
            generation,
            query_rows,
            step,
            added.summed_norm,
            added.method_map,
            ablation,
            added.gradients,
            added.method_window,
        )


def plan_view(
    model: PretrainedModel,
    options: ViewOptions,
    batch: TokenizedBatch,
    targets: TokenizedBatch | None,
    block: Block,
    limits: Limits,
    recordings: RecordingCache,
    *,
    observe: bool = False,
    tiles: bool = False,
) -> ViewPlan:
    """Check one input's options against the model and the limits, and plan its view.

    Every option is checked before anything runs, against the model's config and the
    tokenised length (plus ``max_new_tokens`` with generation): indices, method bounds,
    the response's size and the memory the request would need
    (:mod:`attnviz.pretrained.admission`). Passes are taken from ``recordings`` when kept
    there (a click on a head reuses the grid's pass) and kept there when they fit.

    With ``observe``, a plain request (the weights, pooled to a display size or one head,
    no ablation, query or neuron) whose pass is not kept runs no pass before its walk: the
    walk runs it, observed (:class:`attnviz.pretrained.display.WalkObserver`), the maps
    built during the pass, so that a stream sends each layer as soon as the pass has
    computed it; the pass is kept for tiles where it fits the recording cache's memory or
    disk. With ``tiles`` (a download of the weights), a view that needs no recorded states
    takes the input's pass kept for tiles, running it kept if it is not: the caller reads
    the walk's result as tiles (:meth:`.results.PretrainedAttentions.tile`).

    Raises:
        AttentionInputError: naming a bad option (the server's 422).
        InputTooLargeError: over ATTNVIZ_MAX_WEIGHT_CELLS, ATTNVIZ_MAX_SEQ_LEN (prompt + new
            tokens) or ATTNVIZ_MAX_REQUEST_BYTES (the server's 413).
    """
    b = options.sequence_index
    assert b is not None  # and below len(texts): checked by the caller
    check_view_options(options, block)
    if options.top_k and not model.spec.generates:
        raise AttentionInputError(
            "top_k",
            f"next tokens are for decoders; {model.name} is {model.described}",
        )
    alone = batch.select(b)
    alone_targets = None if targets is None else targets.select(b)
    lengths = InputLengths(
        source=int(alone.input_ids.shape[1]),
        target=None if alone_targets is None else int(alone_targets.input_ids.shape[1]),
        new_tokens=options.max_new_tokens,
    )
    check_generation_length(model, lengths, limits)
    check_options(
        model,
        block,
        lengths,
        layer_index=options.layer_index,
        head_index=options.head_index,
        query_index=options.query_index,
        ablate=options.ablate,
        method=options.method,
        target_index=options.target_index,
        target_token_id=options.target_token_id,
        neuron=options.neuron,
    )
    check_view_cells(model, options, lengths, block, limits)
    run_on = model.device_for(options.device)
    observing = (
        observe
        and not tiles
        and not options.ablate
        and method_spec(options.method).observable
        and (options.display_size is not None or options.head_index is not None)
        and options.query_index is None
        and not options.neuron
        and recordings.kept(model, alone, alone_targets, device=options.device) is None
    )
    recorded = not observing or estimated_recording_bytes(model, lengths) <= recordings.max_bytes
    # an observed pass is kept for tiles where it fits the cache: the next view of the same
    # input (the enlarged head, a layer, a token's rows) then runs no forward pass
    room = max(recordings.max_bytes, recordings.disk_bytes if run_on.type == "cpu" else 0)
    keep = observing and model.attention_path == "recorded" and kept_bytes(model, lengths) <= room
    check_memory(
        model,
        lengths,
        limits.max_request_bytes,
        block=block,
        runs=2 if options.ablate else 1,
        display_size=options.display_size,
        method=options.method,
        free_bytes=device_free_bytes(run_on),
        device=str(run_on),
        layer_index=options.layer_index,
        head_index=options.head_index,
        observed=observing,
        recorded=recorded,
        kept=keep or tiles,
    )
    return ViewPlan(
        model=model,
        options=options,
        block=block,
        recordings=recordings,
        batch=alone,
        targets=alone_targets,
        lengths=lengths,
        observing=observing,
        recorded=recorded,
        keep=keep,
        states=needs_states(options),
        tiles=tiles,
    )
