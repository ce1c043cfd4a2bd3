"""GET /healthz: liveness for load balancers and Docker's HEALTHCHECK."""

from __future__ import annotations

import torch
from fastapi import APIRouter, Request

from ... import __version__
from ..executor import work_state
from ..response_cache import RESPONSES
from ..schemas import HealthResponse
from ..schemas.common import HeldBytes, WorkState

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse, summary="Liveness check")
def read_health(request: Request) -> HealthResponse:
    """Answers 200 while the process serves requests, with what it is computing.

    ``work`` counts the compute pool's computations (running, long ones running and
    waiting, and how those since the start ended): an operator's or a test's events,
    read without waiting on any computation. ``held`` says what the caches hold (bytes),
    the part of the idle server's memory its budgets allow.
    """
    recordings = getattr(request.app.state, "recordings", None)
    in_memory, on_disk = (0, 0) if recordings is None else recordings.held_bytes
    return HealthResponse(
        version=__version__,
        torch=torch.__version__,
        cuda_available=torch.cuda.is_available(),
        work=WorkState(**work_state()),
        held=HeldBytes(
            recordings=in_memory, recordings_on_disk=on_disk, responses=RESPONSES.currsize()
        ),
    )
