"""``show(text, model)``: a pretrained model run on a text, its attention in a notebook view."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .notebook import AttentionView, head_view, model_view

if TYPE_CHECKING:
    from ..pretrained.blocks import Block

_registry: Any = None  # the models show() has loaded, kept for the next call
_wrapped: dict[int, Any] = {}  # the models show() was handed, wrapped once each
_kept: Any = None  # show()'s recording cache, made on first use


def _pictures(image: Any) -> list[Any]:
    """``show``'s ``image`` (one or a list: PIL images, paths, bytes) as RGB PIL images.

    Raises:
        AttentionInputError: (field ``image``) as ``vision.decode_image``.
    """
    from pathlib import Path

    from ..pretrained.vision import decode_image

    given = image if isinstance(image, (list, tuple)) else [image]
    pictures = []
    for one in given:
        if isinstance(one, (str, Path)):
            one = Path(one).read_bytes()
        pictures.append(decode_image(one) if isinstance(one, bytes) else one.convert("RGB"))
    return pictures


def show(
    text: str,
    model: Any = None,
    *,
    tokenizer: Any = None,
    layer: int | None = None,
    method: str = "attention",
    text_pair: str | None = None,
    image: Any = None,
    target: str | None = None,
    block: Block | None = None,
    chat: bool = False,
    max_new_tokens: int = 0,
    temperature: float = 0.0,
    seed: int = 0,
    ablate: Sequence[Sequence[int]] | None = None,
    target_index: int | None = None,
    target_token_id: int | None = None,
    hide_special_tokens: bool = False,
    merge_words: bool = False,
    device: str = "auto",
) -> AttentionView:
    """Run a pretrained model on ``text`` and view what /models shows (needs the pretrained extra).

    Every setting of the /models page, as the fields of POST /api/v1/models/attention
    (the page's "Reproduce in Python" writes this call): the input runs alone through
    :func:`attnviz.pretrained.analysis.plan_view`, as the server runs it, so the
    maps are the page's, unpooled.

    Args:
        text: one input, tokenised by the model's own tokenizer.
        model: a packaged model's name (``all-MiniLM-L6-v2``, ``SmolLM2-135M-Instruct``),
            a local Hugging Face directory or ``.gguf`` file of a text model, a Hugging
            Face id (``gpt2``, ``org/name@revision``), a transformers model already
            loaded (any dtype, device or device map; with ``tokenizer``; recorded where
            it lies, not copied), or a
            :class:`attnviz.pretrained.PretrainedModel`; None for all-MiniLM-L6-v2 (the
            first packaged one).
        tokenizer: the tokenizer of a transformers model passed as ``model``.
        layer: one layer's heads (:func:`head_view`); None for every layer
            (:func:`model_view`).
        method: a method of :data:`attnviz.pretrained.methods.METHODS`. "attention" (the
            softmax weights) and "norm" (Kobayashi et al.'s ‖α f(x)‖) are drawn in every
            map; "rollout", "flow" and "grad_rollout" give a view of their one (L, L) map
            (flow: of ``details["method_window"]`` beyond its bound), "value_zeroing" one
            (L, L) map per layer; "head_importance" the weights, with the (N, H) scores
            in ``details``.
        text_pair: an encoder's sentence B ([CLS] A [SEP] B [SEP]).
        image: a vision-language model's image (LLaVA, Qwen-VL, Idefics3, SmolVLM), or a list of
            them: a PIL image, a file's path or its bytes (PNG, JPEG, WebP, GIF, BMP).
            Each goes where the text writes the processor's image token, else before the
            text; ``details["images"]`` gives each image token's position and the
            rectangle of the image it covers (:class:`attnviz.pretrained.image_tokens.ImageTokens`).
        target: an encoder-decoder's decoder text (required there, refused elsewhere).
        block: "encoder", "decoder" or "cross" (default the model's first block).
        chat: the text as a user message in the model's chat template (decoders).
        max_new_tokens: a decoder first continues the text by this many tokens; the maps
            are then of prompt + new tokens.
        temperature: generation: 0 greedy, above 0 sampling.  seed: the sampling's seed.
        ablate: heads switched off, ``[(layer, head), ...]`` (Michel et al. 2019): the
            maps are the ablated model's; ``details["ablation"]`` says what it changed.
        target_index: a gradient method's output position (default the last content
            token; an encoder's first).  target_token_id: its next token (decoders).
        hide_special_tokens: leave [CLS], [SEP] and the like out, rows renormalised.
        merge_words: one row and column per word (pieces summed over keys, averaged
            over queries).
        device: "auto", "cpu" or "cuda".

    Returns:
        An :class:`AttentionView`; its ``maps`` are float32 (N, H, L_q, L_k), and its
        ``details`` hold what the page shows beside them: ``method``, ``tokens``,
        ``generated`` (the new tokens), ``ablation``, ``target`` (what a gradient method
        explained: position, token id and value), ``head_importance`` ((N, H)),
        ``method_map`` and ``method_window``.

    Raises:
        AttentionInputError: no such model, method, layer or block; a setting the model
            does not take (``chat`` without a template, ``max_new_tokens`` for an
            encoder, ``target`` for a decoder, a head it lacks in ``ablate``, an image
            for a model that reads none), named as the API's field.
    """
    from ..attention.errors import AttentionInputError
    from ..pretrained.analysis import Limits, ViewOptions
    from ..pretrained.methods import METHODS, method_spec
    from ..pretrained.view_plan import plan_view

    if method not in METHODS:
        raise AttentionInputError("method", f"{method!r}: choose one of {', '.join(METHODS)}")
    pretrained = text_model(model, tokenizer)
    if image is None:
        batch = pretrained.tokenize([text], None if text_pair is None else [text_pair], chat=chat)
    else:
        from ..pretrained.vision_language import image_prompt

        batch = image_prompt(
            pretrained, [text], _pictures(image), chat=chat,
            removes_tokens=hide_special_tokens or merge_words,
        )  # fmt: skip
    targets = None if target is None else pretrained.decoder_inputs([target])
    if block is not None and block not in pretrained.blocks:
        raise AttentionInputError(
            "block", f"{block!r}: {pretrained.name} has {', '.join(pretrained.blocks)}"
        )
    shown_block: Block = block or pretrained.blocks[0]
    options = ViewOptions(
        sequence_index=0,
        device=device,
        method=method,  # type: ignore[arg-type]
        hide_special_tokens=hide_special_tokens,
        merge_words=merge_words,
        ablate=None if not ablate else [[int(n), int(h)] for n, h in ablate],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        target_index=target_index,
        target_token_id=target_token_id,
    )
    # A local call has the machine to itself: no server's response or memory limits.
    unbounded = Limits(max_seq_len=2**31, max_weight_cells=2**62, max_request_bytes=2**62)
    prepared = plan_view(
        pretrained, options, batch, targets, shown_block, unbounded, _recordings()
    ).run()
    walk = prepared.walk
    maps = np.stack([m.attentions.numpy() for m in walk.layers()])  # (N, H, L_q, L_k)
    view = walk.summary().view
    tokens, key_tokens = view.tokens, view.key_tokens
    spec = method_spec(method)
    details: dict[str, Any] = {"method": method, "tokens": tokens, "key_tokens": key_tokens}
    if batch.images:
        details["images"] = [placed.payload() for placed in batch.images]
    if prepared.generation is not None:
        details["generated"] = list(prepared.generation.new_tokens)
    if prepared.ablation is not None:
        details["ablation"] = prepared.ablation
    if prepared.gradients is not None:
        goal = prepared.gradients.target
        details["target"] = {
            "kind": goal.kind,
            "index": goal.position,
            "token_id": goal.token_id,
            "value": goal.value,
        }
        details["head_importance"] = prepared.gradients.head_importance(shown_block).numpy()
    method_map = prepared.method_map
    if spec.map_is_rollout and view.rollout is not None:
        method_map = view.rollout[None]
    axes: dict[str, Any] = (
        {"tokens": tokens}
        if key_tokens == tokens
        else {"tokens": key_tokens, "target_tokens": tokens}
    )
    if method_map is not None and not spec.per_head:
        array = method_map.numpy()
        window = prepared.method_window
        details.update(method_map=array, method_window=window)
        label = spec.label or spec.name
        if window is not None:
            axes = {"tokens": tokens[window[0] : window[1]]}
        if len(array) == 1:  # one (L, L) map: rollout, flow, gradient-weighted rollout
            return _detailed(
                model_view(array[None, None], **axes, title=f"{pretrained.name}: {label}"), details
            )
        maps = array[:, None, None]  # (N, 1, 1, L_q, L_k): value zeroing, a map per layer
        title = f"{pretrained.name}: {label}"
    else:
        maps = maps[:, None]  # (N, 1, H, L_q, L_k)
        what = spec.value_name if spec.per_head else "attention"
        title = f"{pretrained.name}: {what}"
    if layer is None:
        return _detailed(model_view(maps, **axes, title=f"{title}, {len(maps)} layers"), details)
    if not 0 <= layer < len(maps):
        raise AttentionInputError("layer", f"{layer} is not below {len(maps)}")
    return _detailed(head_view(maps, **axes, layer=layer, title=f"{title}, layer {layer}"), details)


def _detailed(view: AttentionView, details: dict[str, Any]) -> AttentionView:
    """``view`` with ``details`` (what show computed beside the maps)."""
    view.details = details
    return view


def _recordings() -> Any:
    """The passes show() keeps (a second view of the same text reuses its pass)."""
    global _kept
    from ..pretrained.recordings import RecordingCache

    if _kept is None:
        _kept = RecordingCache()
    return _kept


def text_model(model: Any = None, tokenizer: Any = None) -> Any:
    """The text model ``model`` names, loaded once per process (needs the pretrained extra).

    Args:
        model: a packaged model's name, a local Hugging Face directory or ``.gguf`` file,
            a Hugging Face id (``gpt2``, ``org/name@revision``: from the local cache
            with ``HF_HUB_OFFLINE=1``, else downloaded; :mod:`attnviz.pretrained.hub`),
            a transformers model already loaded (with ``tokenizer``; recorded where it
            lies, not copied), or a :class:`attnviz.pretrained.PretrainedModel`; None for
            all-MiniLM-L6-v2 (the first packaged one).
        tokenizer: the tokenizer of a transformers model passed as ``model``.

    Returns:
        The :class:`attnviz.pretrained.PretrainedModel`.

    Raises:
        AttentionInputError: no such model (field ``model``), no tokenizer for a loaded
            transformers model (``tokenizer``), a speech or image model (``model``).
    """
    global _registry
    from ..attention.errors import AttentionInputError
    from ..pretrained import PACKAGED_MODELS, ModelRegistry, PretrainedModel, wrap_model
    from ..pretrained.model import LoadedModel, ModelFormatError
    from ..pretrained.registry import path_exists

    loaded: LoadedModel
    if isinstance(model, LoadedModel):  # a model AttnViz loaded (an image model is refused)
        loaded = model
    elif model is not None and not isinstance(model, str | Path):  # loaded by the caller
        if tokenizer is None:
            raise AttentionInputError("tokenizer", "pass the loaded model's tokenizer too")
        loaded = _wrapped.get(id(model)) or wrap_model(model, tokenizer)
        _wrapped[id(model)] = loaded
    else:
        if model is None:  # the default text model, not whichever model a registry holds
            model = PACKAGED_MODELS[0].name
        text = str(model)
        local = text not in {m.name for m in PACKAGED_MODELS} and path_exists(Path(text))
        name = Path(text).resolve().name.removesuffix(".gguf") if local else text
        if _registry is None or name not in _registry.names():
            registry = ModelRegistry()
            try:  # a packaged name, a path or a Hugging Face id, as ATTNVIZ_MODELS
                registry.configure([], models=[text], packaged=[])
            except ModelFormatError as error:
                raise AttentionInputError(
                    "model", str(error).removeprefix("ATTNVIZ_MODELS: ")
                ) from error
            registry.load()
            _registry = registry
            name = registry.names()[0]
        loaded = _registry.get(name)
    loaded.require("text", "use /models, or POST the file to /api/v1/speech or /vision")
    assert isinstance(loaded, PretrainedModel)  # a text model: require said so
    return loaded
