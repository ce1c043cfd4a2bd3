"""GET /healthz: liveness for load balancers and Docker's HEALTHCHECK."""

from __future__ import annotations

import torch
from fastapi import APIRouter

from app import __version__
from app.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness check")
def read_health() -> Health:
    """Answers 200 while the process serves requests."""
    return Health(
        version=__version__, torch=torch.__version__, cuda_available=torch.cuda.is_available()
    )
