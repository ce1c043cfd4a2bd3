"""Models named by Hugging Face id (``gpt2``, ``org/name``, ``org/name@revision``).

Researchers name models as transformers, TransformerLens and nnsight do: by their id on the
Hugging Face hub. ``huggingface_hub`` resolves an id to a folder of the local cache
(``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ~/.cache/huggingface/hub), laid out as
``models--org--name/refs/<branch>`` (a commit hash) and ``models--org--name/snapshots/<commit>/``:

* offline (``HF_HUB_OFFLINE=1``), from the cache only, with no network call at all;
* otherwise by download (progress bars on stderr), only the files a model needs (config,
  tokenizer, safetensors weights; ``*.bin`` weights when a repository has no
  safetensors), each request bounded by ``etag_timeout``; a hub that cannot be reached
  falls back to the cache (``huggingface_hub.snapshot_download``'s own behaviour).

An id that is neither cached nor downloadable is a :class:`.model.ModelFormatError` saying
so and how to fetch it. The folder is then loaded like any local directory
(:func:`.loading.load_model_dir`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .model import ModelFormatError

_ID: Final = re.compile(
    r"(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)?)"
    r"(?:@(?P<revision>[A-Za-z0-9_./-]+))?"
)
"""``name``, ``org/name``, each optionally ``@revision`` (a branch, tag or commit hash)."""
MODEL_FILES: Final = (
    "*.json",
    "*.safetensors",
    "*.txt",
    "*.model",
    "*.tiktoken",
    "*.jinja",
)
"""What a download fetches: config, tokenizer files, chat template and safetensors weights
(not a repository's ONNX, TFLite, Flax or GGUF copies)."""
LEGACY_WEIGHTS: Final = ("*.bin",)
"""Fetched too when a repository has no safetensors weights (PyTorch pickles)."""
ETAG_TIMEOUT_S: Final = 10.0
"""Seconds each metadata request to the hub may take before the cache is used instead."""


@dataclass(frozen=True)
class HubId:
    """A model's id on the Hugging Face hub.

    Attributes:
        repo: ``name`` or ``org/name``.
        revision: a branch, tag or commit hash; None for the default branch ("main").
    """

    repo: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo if self.revision is None else f"{self.repo}@{self.revision}"


MAX_ID_PART: Final = 96
"""The longest ``org`` or ``name`` the Hugging Face hub allows (its repo-name rule)."""
ID_RULE: Final = (
    "a Hugging Face id is name, org/name or org/name@revision: letters, digits, '-', '_' and "
    f"'.', at most {MAX_ID_PART} characters a part, no '..', spaces, '#' or URL"
)
"""What an id may be, as the refusal of a malformed one says it."""


def parse_hub_id(text: str) -> HubId | None:
    """``text`` as a :class:`HubId`, or None when it cannot be one (a path, a URL, spaces).

    :data:`ID_RULE`: a part over :data:`MAX_ID_PART` characters is not an id either.
    """
    match = _ID.fullmatch(text.strip())
    if match is None or ".." in text or text.strip().endswith((".gguf", "/")):
        return None
    if any(len(part) > MAX_ID_PART for part in match["repo"].split("/")):
        return None
    return HubId(match["repo"], match["revision"])


def shown_name(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters with its length said."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text):,} characters)"


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or transformers' ``TRANSFORMERS_OFFLINE``) is set, now."""
    return any(
        os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_cache_dir() -> Path:
    """The hub cache, read from the environment now: HF_HUB_CACHE, HF_HOME/hub, or the default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "huggingface" / "hub"


def resolve_hub_model(model: HubId) -> Path:
    """The local folder of ``model``: from the cache when offline, else downloaded (or cached).

    Returns:
        The snapshot folder (config.json, tokenizer, weights) in :func:`hub_cache_dir`.

    Raises:
        ModelFormatError: offline and not in the cache (the message says where it looked,
            and how to fetch it), unknown to the hub, or a download that failed.
        ImportError: huggingface_hub is not installed (the pretrained extra).
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    cache, offline = hub_cache_dir(), hub_offline()

    def download(patterns: tuple[str, ...]) -> Path:
        return Path(
            snapshot_download(
                model.repo,
                revision=model.revision,
                cache_dir=cache,
                local_files_only=offline,
                allow_patterns=list(patterns),
                etag_timeout=ETAG_TIMEOUT_S,
                endpoint=os.environ.get("HF_ENDPOINT") or None,  # read now, not at import
            )
        )

    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    quiet = are_progress_bars_disabled()  # transformers' loader silences them: not here
    enable_progress_bars()
    try:
        folder = download(MODEL_FILES)
        if not offline and not _has_weights(folder):
            folder = download(MODEL_FILES + LEGACY_WEIGHTS)
    except LocalEntryNotFoundError as error:
        why = (
            "HF_HUB_OFFLINE is set"
            if offline
            else f"the hub could not be reached ({_first_line(error)})"
        )
        raise ModelFormatError(
            f"{model}: not in the local Hugging Face cache ({cache}) and {why}; fetch it "
            f"where the hub is reachable (hf download {model.repo}"
            + (f" --revision {model.revision}" if model.revision else "")
            + ") into that cache (HF_HUB_CACHE or HF_HOME), or unset HF_HUB_OFFLINE"
        ) from error
    except (RepositoryNotFoundError, GatedRepoError) as error:
        raise ModelFormatError(
            f"{model}: the hub has no such model, or it is private or gated "
            f"(log in with hf auth login): {_first_line(error)}"
        ) from error
    except RevisionNotFoundError as error:
        raise ModelFormatError(
            f"{model}: no revision {model.revision!r}: {_first_line(error)}"
        ) from error
    except OSError as error:
        raise ModelFormatError(f"{model}: the download failed: {_first_line(error)}") from error
    finally:
        if quiet:
            disable_progress_bars()
    if not (folder / "config.json").is_file():
        raise ModelFormatError(f"{model}: {folder} has no config.json (not a transformers model)")
    return folder


def hub_source(model: HubId, folder: Path) -> str:
    """Where an id's model came from, for GET /api/v1/models: the id and the snapshot's commit."""
    return f"Hugging Face {model} (snapshot {folder.name[:12]}, {folder})"


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
