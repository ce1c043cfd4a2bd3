"""FastAPI dependencies the routers share."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from .settings import Settings, get_settings

SettingsDep = Annotated[Settings, Depends(get_settings)]
"""The process-wide :class:`Settings` (tests replace ``get_settings`` through
``app.dependency_overrides``)."""
