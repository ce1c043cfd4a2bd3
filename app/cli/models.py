"""``attnviz models``: load the pretrained models the server would offer, and list them."""

from __future__ import annotations

import argparse
from typing import Any

from .common import DefaultsShown, name_models


def run(args: argparse.Namespace) -> None:
    """Load the pretrained models the server would offer (filling the GGUF cache); list them.

    Exits 1 when a model failed to load.
    """
    from ..pretrained import ModelRegistry
    from ..server.settings import get_settings

    name_models(args.model)
    settings = get_settings()
    registry = ModelRegistry()
    registry.configure(
        settings.model_dirs,
        models=settings.models,
        packaged=settings.packaged_models,
        cache_dir=settings.cache_dir,
        placement=settings.placement(),
    )
    registry.load()
    failed = False
    for entry in registry.entries():
        model = entry.model
        if model is None:
            failed = True
            print(f"{entry.name}: failed: {entry.error}")
            continue
        print(
            f"{entry.name}: {model.family} ({model.architecture}), {model.num_layers} layers x "
            f"{model.num_heads} heads ({model.num_key_value_heads} key/value), "
            f"loaded in {model.load_s:.1f} s from {entry.source}"
        )
    if not registry.entries():
        print("no pretrained model is installed")
    if failed:
        raise SystemExit(1)


def add_parser(commands: Any) -> None:
    """``models`` and its options, on the main parser's subcommands."""
    parser = commands.add_parser(
        "models",
        formatter_class=DefaultsShown,
        help="load and list the pretrained models (ATTNVIZ_MODELS, ATTNVIZ_PACKAGED_MODELS, "
        "ATTNVIZ_MODEL_DIRS), filling the cache of GGUF models (ATTNVIZ_CACHE_DIR)",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model to load too, repeatable: a Hugging Face id, a packaged name or a "
        "local directory (added to ATTNVIZ_MODELS)",
    )
    parser.set_defaults(run=run)
