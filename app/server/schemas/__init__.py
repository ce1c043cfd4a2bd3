"""Request and response bodies of the JSON API (/api/v1), by area.

A body a client sends is a ``…Request``, a body it receives a ``…Response``; the
parts of a response that mirror an engine dataclass of the same name end in ``Out``.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel

from .attention import AttentionRequest, AttentionResponse, Preset
from .common import HealthResponse
from .lessons import (
    DecodingRequest,
    DecodingResponse,
    ParameterTableResponse,
    ScalingRequest,
    ScalingResponse,
    TransformerRequest,
    TransformerResponse,
)
from .models import FamilyInfo, ModelInfo, ModelListResponse
from .pretrained import (
    PretrainedAttentionRequest,
    PretrainedAttentionResponse,
    PretrainedDownloadRequest,
    PretrainedLayersRequest,
)

REQUEST_SCHEMAS: Final[tuple[type[BaseModel], ...]] = (
    AttentionRequest,
    ScalingRequest,
    DecodingRequest,
    TransformerRequest,
    PretrainedAttentionRequest,
    PretrainedLayersRequest,
    PretrainedDownloadRequest,
)
"""Every request body of the API (their integer bounds are kept exact in /openapi.json)."""


__all__ = [
    "REQUEST_SCHEMAS",
    "AttentionRequest",
    "AttentionResponse",
    "DecodingRequest",
    "DecodingResponse",
    "FamilyInfo",
    "HealthResponse",
    "ModelInfo",
    "ModelListResponse",
    "ParameterTableResponse",
    "Preset",
    "PretrainedAttentionRequest",
    "PretrainedAttentionResponse",
    "PretrainedDownloadRequest",
    "PretrainedLayersRequest",
    "ScalingRequest",
    "ScalingResponse",
    "TransformerRequest",
    "TransformerResponse",
]
