"""Every size limit in one place: the API's fixed bounds (the settings' checks: :mod:`.checks`).

The fixed bounds are in the request schemas (a request over one is a 422, and they
appear in /openapi.json); the settings (``ATTNVIZ_MAX_*``, ``ATTNVIZ_MAX_WEIGHT_CELLS``)
default to them and can lower them, and a request over a setting is refused with 413,
naming the field, its value and the limit.
"""

from __future__ import annotations

from typing import Final

from ..attention.engine import MAX_NUM_HEADS
from ..attention.transformer import MAX_LAYERS

MAX_TOKENS: Final = 8192
"""The most tokens one sequence may have."""
MAX_BATCH: Final = 64
"""The most sequences (or texts) one batch may have."""
MAX_ATLAS_TEXTS: Final = 256
"""The most texts of a corpus a head atlas request may bring (one forward pass each)."""
MAX_D_MODEL: Final = 1024
"""The widest seeded layer."""
MAX_VOCAB_SIZE: Final = 32768
"""The largest embedding table of a seeded layer."""
MAX_DECODING_TOKENS: Final = 128
"""The most tokens of the step-by-step decoding lesson (one forward pass per token)."""
MAX_TEXT_CHARS: Final = 2**20
"""The most characters of one text sent to a pretrained model: 131,072 tokens of prose
(about 4 characters a token) and room over; the request body's own limit
(ATTNVIZ_MAX_BODY_BYTES, 4 MiB) and the model's positions bound it too."""
MAX_SCALING_D_K: Final = 4096
"""The widest head of the scaling lesson."""
MAX_SCALING_CASES: Final = 8
"""The most head widths the scaling lesson compares at once."""
MAX_SCALING_LENGTH: Final = 128
"""The most queries and keys per sample of the scaling lesson."""
MAX_SCALING_SAMPLES: Final = 256
"""The most random (Q, K) draws per head width of the scaling lesson."""
MAX_SCALING_VALUES: Final = 2**25
"""The most values the scaling lesson draws for Q in one request (as many again for K):
``num_samples * length * sum(d_k_values)``. Each bound above alone allowed 1.07e9 (eight
head widths of 4,096, 256 samples of 128): one request then held 1.9 GB and took 19 CPU-s.
At this bound a request holds at most 0.27 GB of draws (Q and K of float32) and takes
about a second; the tutorial's widths (8, 64, 512) fit it at 256 samples of 128."""
MAX_HISTOGRAM_BINS: Final = 100
"""The most histogram bins of the scaling lesson."""
MAX_ABLATED_HEADS: Final = 512
"""The most [layer, head] pairs one request switches off (SmolLM2 has 270 heads)."""
MAX_MODEL_NAME_CHARS: Final = 200
"""The longest model name a request may send."""
MAX_BODY_BYTES: Final = 4 * 2**20
"""The largest request body (ATTNVIZ_MAX_BODY_BYTES's default), in bytes."""
MAX_UPLOAD_BYTES: Final = 32 * 2**20
"""The largest upload to POST /api/v1/speech, /vision and /models/attention/upload
(ATTNVIZ_MAX_UPLOAD_BYTES's default), in bytes: 30 s of 48 kHz stereo WAV is 11 MB, a
phone photo 5 to 10 MB."""
UPLOAD_PATHS: Final = ("/api/v1/speech", "/api/v1/vision", "/api/v1/models/attention/upload")
"""The routes whose bodies are files, allowed up to the upload limit."""
MAX_WEIGHT_CELLS: Final = 32 * 2**20
"""The most numbers one response may carry (ATTNVIZ_MAX_WEIGHT_CELLS's default)."""
MAX_D_FF: Final = 4096
"""The widest feed-forward of the encoder-layer lesson."""
MAX_DISPLAY_SIZE: Final = 4096
"""The largest display_size of the seeded attention (rows and columns after pooling)."""
MAX_MODEL_DISPLAY_SIZE: Final = 1024
"""The largest display_size of a pretrained model's maps (N * H of them per input)."""
MAX_REQUEST_BYTES: Final = 3 * 2**30
"""The most memory one pretrained-model request may need at its peak, estimated before it
runs (ATTNVIZ_MAX_REQUEST_BYTES's default), in bytes."""
MAX_DOWNLOAD_BYTES: Final = 2 * 2**30
"""The largest file of exact maps POST /api/v1/models/attention/download sends
(ATTNVIZ_MAX_DOWNLOAD_BYTES's default), in bytes: a head of 8,192 tokens is 256 MiB of
float32, a layer of SmolLM2's 9 heads at 4,096 tokens 576 MiB."""
MAX_NEW_TOKENS: Final = 64
"""The most tokens a decoder generates for one request."""
MAX_TEMPERATURE: Final = 10.0
"""The highest sampling temperature of generation."""
LONG_WORK_TOKENS: Final = 1024
"""The most tokens a pretrained-model pass may run over and still be short work, not long.

Counted as the pass runs them: for one input (``sequence_index``), its prompt tokens plus
``max_new_tokens`` (plus its decoder targets); for a whole batch, the padded batch's
B x L tokens (plus its targets'). A request over it whose pass is not kept already takes
the long computations' share of the compute pool (:func:`.executor.long_slot`), as a
head atlas does: SmolLM2-135M's grid at 1024 tokens takes 6.5 s on two CPU cores
(docs/performance.md), a sentence's a fraction of a second.
"""
__all__ = [
    "LONG_WORK_TOKENS",
    "MAX_ATLAS_TEXTS",
    "MAX_BATCH",
    "MAX_BODY_BYTES",
    "MAX_DECODING_TOKENS",
    "MAX_DISPLAY_SIZE",
    "MAX_DOWNLOAD_BYTES",
    "MAX_D_FF",
    "MAX_D_MODEL",
    "MAX_HISTOGRAM_BINS",
    "MAX_LAYERS",
    "MAX_MODEL_DISPLAY_SIZE",
    "MAX_MODEL_NAME_CHARS",
    "MAX_NEW_TOKENS",
    "MAX_NUM_HEADS",
    "MAX_REQUEST_BYTES",
    "MAX_SCALING_CASES",
    "MAX_SCALING_D_K",
    "MAX_SCALING_LENGTH",
    "MAX_SCALING_SAMPLES",
    "MAX_SCALING_VALUES",
    "MAX_TEMPERATURE",
    "MAX_TEXT_CHARS",
    "MAX_TOKENS",
    "MAX_UPLOAD_BYTES",
    "MAX_VOCAB_SIZE",
    "MAX_WEIGHT_CELLS",
    "UPLOAD_PATHS",
]
