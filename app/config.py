"""Settings from environment variables (prefix ``ATTNVIZ_``) or a ``.env`` file."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Server settings; each field is read from ``ATTNVIZ_<NAME>``.

    Attributes:
        host: interface uvicorn binds to (``python -m app``).
        port: TCP port.
        max_weight_cells: the most numbers one request may compute for its response,
            B * H * L_q * L_k for the weights plus any stages asked for; a larger
            request is refused with HTTP 413. The default, 2**25, admits B=1, H=8,
            L=2048 (134 MB of float32 weights).
        model_cache_bytes: parameter bytes of seeded modules kept between requests.
        compute_workers: threads that run attention (app.compute); requests beyond
            them queue.
        response_cache_bytes: bytes of finished responses kept for repeated
            identical requests (0 turns the cache off).
        response_cache_item_bytes: the largest response kept.
    """

    model_config = SettingsConfigDict(env_prefix="ATTNVIZ_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    max_weight_cells: int = Field(33_554_432, ge=1)
    model_cache_bytes: int = Field(512 * 1024 * 1024, ge=0)
    compute_workers: int = Field(2, ge=1, le=64)
    response_cache_bytes: int = Field(64 * 2**20, ge=0)
    response_cache_item_bytes: int = Field(2**20, ge=1)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once; tests override via dependency_overrides."""
    return Settings()
