"""FastAPI dependencies the routers share: the settings and the pretrained-model caches."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..pretrained import ModelRegistry
from ..pretrained.recordings import RecordingCache
from .settings import Settings, get_settings

SettingsDep = Annotated[Settings, Depends(get_settings)]
"""The process-wide :class:`Settings` (tests replace ``get_settings`` through
``app.dependency_overrides``)."""


def get_registry(request: Request) -> ModelRegistry:
    """The app's pretrained models (``app.state.registry``, configured in the lifespan)."""
    return request.app.state.registry  # type: ignore[no-any-return]


def get_recordings(request: Request) -> RecordingCache:
    """The app's recent forward passes (``app.state.recordings``, sized in the lifespan)."""
    return request.app.state.recordings  # type: ignore[no-any-return]


RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
"""The models on offer, by name (:class:`attnviz.pretrained.ModelRegistry`)."""
RecordingsDep = Annotated[RecordingCache, Depends(get_recordings)]
"""The recent forward passes kept for the next click (:class:`.recordings.RecordingCache`)."""
