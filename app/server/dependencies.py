"""What the routers share: the settings, the pretrained-model caches, the model a request names."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import Depends, HTTPException, Request, status

from ..pretrained import ModelNotReady, ModelRegistry
from ..pretrained.model import LoadedModel
from ..pretrained.recordings import RecordingCache
from .errors import engine_errors, field_loc
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

RETRY_AFTER_S = 2
"""What a 503 for a model still loading tells the client to wait, in seconds."""

MODALITY_ROUTES: Final = {
    "text": "POST /api/v1/models/attention",
    "speech": "POST /api/v1/speech (multipart: audio)",
    "image": "POST /api/v1/vision (multipart: image)",
}
"""Where each kind of model takes its input, for the 422 of a model sent the wrong kind."""


def ready_model(registry: ModelRegistry, name: str | None, modality: str = "text") -> LoadedModel:
    """The model a request names, or an HTTP error: 422 unknown or failed, 503 loading.

    A model of another modality (a speech model sent text) is a 422 too. With ``name``
    None: the default (first) model for text, the first ready model of
    the modality otherwise.

    Raises:
        HTTPException: as above; the 503 carries Retry-After.
    """
    try:
        with engine_errors("cpu"):
            if name is None and modality != "text":
                name = registry.first_of(modality)
            model = registry.get(name)
            model.require(modality, MODALITY_ROUTES[model.modality])
            return model
    except ModelNotReady as error:
        raise HTTPException(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=[{"loc": field_loc("model", "body"), "msg": str(error), "type": "loading"}],
            headers={"Retry-After": str(RETRY_AFTER_S)},
        ) from error
