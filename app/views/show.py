"""``show(text, model)``: a pretrained model run on a text, its attention in a notebook view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .notebook import AttentionView, head_view, model_view

_registry: Any = None  # the models show() has loaded, kept for the next call
_wrapped: dict[int, Any] = {}  # the models show() was handed, wrapped once each


def show(
    text: str,
    model: Any = None,
    *,
    tokenizer: Any = None,
    layer: int | None = None,
    method: str = "attention",
    target: str | None = None,
    device: str = "auto",
) -> AttentionView:
    """Run a pretrained model on ``text`` and view its attention (needs the pretrained extra).

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
        method: one of :data:`attnviz.pretrained.methods.DRAWN_METHODS`: "attention"
            (the softmax weights) or "norm" (Kobayashi et al.'s ‖α f(x)‖).
        target: an encoder-decoder's decoder text (required there, refused elsewhere).
        device: "auto", "cpu" or "cuda".

    Returns:
        An :class:`AttentionView` of the model's first block (an encoder-decoder's encoder).

    Raises:
        AttentionInputError: no such model, method or layer; a text the model cannot take.
    """
    import torch

    from ..attention.errors import AttentionInputError
    from ..pretrained.methods import DRAWN_METHODS, method_spec, with_method

    if method not in DRAWN_METHODS:
        drawn = " or ".join(map(repr, DRAWN_METHODS))
        raise AttentionInputError("method", f"{method!r}: show draws {drawn}")
    pretrained = text_model(model, tokenizer)
    targets = None if target is None else [target]
    result = pretrained.attention([text], targets=targets, device=device)
    network = pretrained.on(torch.device(result.device))
    result = with_method(result, network, method)
    block = result.first_block
    maps = np.stack(
        [result.layer_weights(block, n).numpy() for n in range(result.num_layers(block))]
    )  # (N, 1, H, L, L)
    tokens = result.queries(block).tokens[0]
    spec = method_spec(method)
    what = spec.value_name if spec.per_head else "attention"
    title = f"{pretrained.name}: {what}"
    if layer is None:
        return model_view(maps, tokens, title=f"{title}, {len(maps)} layers")
    if not 0 <= layer < len(maps):
        raise AttentionInputError("layer", f"{layer} is not below {len(maps)}")
    return head_view(maps, tokens, layer=layer, title=f"{title}, layer {layer}")


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
        local = text not in {m.name for m in PACKAGED_MODELS} and Path(text).exists()
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
