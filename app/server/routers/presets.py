"""GET /api/v1/presets: the named example requests."""

from __future__ import annotations

from fastapi import APIRouter

from ..presets import PRESETS
from ..schemas.attention import Preset

router = APIRouter(prefix="/api/v1", tags=["presets"])


@router.get("/presets", response_model=list[Preset], summary="Named example requests")
def list_presets() -> list[Preset]:
    """The presets, default first: the tutorials' batches and "I love deep learning"."""
    return list(PRESETS)
