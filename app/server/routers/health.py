"""GET /healthz: liveness for load balancers and Docker's HEALTHCHECK."""

from __future__ import annotations

import torch
from fastapi import APIRouter

from ... import __version__
from ..schemas import HealthResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse, summary="Liveness check")
def read_health() -> HealthResponse:
    """Answers 200 while the process serves requests."""
    return HealthResponse(
        version=__version__, torch=torch.__version__, cuda_available=torch.cuda.is_available()
    )
