"""GET /healthz: liveness for load balancers and Docker's HEALTHCHECK."""

from __future__ import annotations

import torch
from fastapi import APIRouter

from ... import __version__
from ..executor import work_state
from ..schemas import HealthResponse
from ..schemas.common import WorkState

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse, summary="Liveness check")
def read_health() -> HealthResponse:
    """Answers 200 while the process serves requests, with what it is computing.

    ``work`` counts the compute pool's computations (running, long ones running and
    waiting, and how those since the start ended): an operator's or a test's events,
    read without waiting on any computation.
    """
    return HealthResponse(
        version=__version__,
        torch=torch.__version__,
        cuda_available=torch.cuda.is_available(),
        work=WorkState(**work_state()),
    )
