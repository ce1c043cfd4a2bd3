"""The models a server offers, by name, loaded in the background with a state each.

Names are known at once (``ATTNVIZ_MODELS`` as named there: Hugging Face ids such as
``org/name@revision``, packaged names or paths; then the packaged models, then
``ATTNVIZ_MODEL_DIRS`` named after their folder or file); loading runs in one
background thread, in that order (a Hugging Face id resolved to its cached or
downloaded folder first, :mod:`.hub`), so the
server answers from the first second: a model is ``"loading"``, then ``"ready"`` or
``"failed"`` with the reason. Loaded models are shared by every request: they only
ever run under ``torch.inference_mode()`` and are never changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..attention.errors import AttentionInputError
from .hub import ID_RULE, HubId, hub_source, parse_hub_id, resolve_hub_model, shown_name
from .loading import PACKAGED_MODELS, PRETRAINED_EXTRA, default_cache_dir, load_model
from .model import LoadedModel, ModelFormatError
from .placement import Placement

ModelState = Literal["loading", "ready", "failed"]
_LOADING = threading.Lock()


def path_exists(path: Path) -> bool:
    """``path.exists()``, False for a name the system refuses (too long, a NUL in it)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def check_model_name(text: str) -> None:
    """Refuse at once a model name that is neither packaged, a path nor a Hugging Face id.

    What :meth:`ModelRegistry.configure` checks of each entry of ``models``, with nothing
    loaded, resolved or downloaded: the CLI's usage check of ``--model`` and
    ``ATTNVIZ_MODELS`` before it starts anything.

    Raises:
        ModelFormatError: the name and the rule it breaks (:data:`.hub.ID_RULE`).
    """
    ModelRegistry._named(text, {m.name: m for m in PACKAGED_MODELS}, time.monotonic())


class ModelNotReady(Exception):  # noqa: N818  (a state, not an error of the caller)
    """The model is still loading; the message says for how long so far."""

    def __init__(self, name: str, waited_s: float) -> None:
        super().__init__(
            f"model {name!r} is still loading ({waited_s:.0f} s so far); try again shortly"
        )
        self.name = name


@dataclass
class ModelEntry:
    """One model on offer and where its loading stands.

    Attributes:
        name: what requests name it by.
        path: its directory or GGUF file.
        source: where it came from (a package and its version, or the path).
        state: "loading", "ready" or "failed".
        error: why it failed, else None.
        model: the loaded model once ready, else None.
        queued_at: ``time.monotonic()`` when it was registered.
        hub: the Hugging Face id it is named by, resolved to ``path`` when it loads;
            None for a packaged model or a path.
    """

    name: str
    path: Path
    source: str
    state: ModelState = "loading"
    error: str | None = None
    model: LoadedModel | None = None
    queued_at: float = 0.0
    hub: HubId | None = None


class ModelRegistry:
    """The models this server offers, by name; configured at start-up (lifespan)."""

    def __init__(self) -> None:
        self._entries: dict[str, ModelEntry] = {}
        self._done = threading.Event()
        self._done.set()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._cache_dir = default_cache_dir()
        self._placement: Placement | None = None

    def configure(
        self,
        model_dirs: Sequence[Path],
        *,
        models: Sequence[str] = (),
        packaged: bool | Sequence[str] = True,
        cache_dir: Path | None = None,
        placement: Placement | None = None,
    ) -> None:
        """Name the models on offer; none is loaded yet (:meth:`load` or :meth:`start`).

        Args:
            model_dirs: local directories or ``.gguf`` files, each named after its
                folder (or file, without ``.gguf``).
            models: models offered first (the first is then the default), each named
                as given: a packaged model's name, a local directory or ``.gguf`` file
                (named after it), or a Hugging Face id (``gpt2``, ``org/name``,
                ``org/name@revision``; :mod:`.hub`), in that order of precedence.
            packaged: the packaged models to offer (True: every one installed).
            cache_dir: where dequantized GGUF models are kept.
            placement: the dtype and devices every model is loaded in
                (:class:`.placement.Placement`; default float32 on the CPU, or the
                checkpoint's dtype on CUDA).

        Raises:
            ModelFormatError: a path does not exist, two models share a name, an
                unknown packaged model is named, or an entry of ``models`` is neither a
                packaged name, a path nor a Hugging Face id; the message names the
                setting.
        """
        wanted = [m.name for m in PACKAGED_MODELS] if packaged is True else list(packaged or [])
        known = {m.name: m for m in PACKAGED_MODELS}
        entries: dict[str, ModelEntry] = {}
        now = time.monotonic()
        for text in models:
            entry = self._named(text, known, now)
            if entry.name in entries:
                raise ModelFormatError(f"ATTNVIZ_MODELS: {entry.name!r} is named twice")
            entries[entry.name] = entry
        wanted = [name for name in wanted if name not in entries]
        for name in wanted:
            if name not in known:
                raise ModelFormatError(
                    f"ATTNVIZ_PACKAGED_MODELS: no packaged model {name!r}; "
                    f"choose from {', '.join(known)}"
                )
            path = known[name].locate()
            if path is not None:
                entries[name] = ModelEntry(name, path, known[name].source(), queued_at=now)
        for directory in model_dirs:
            path = Path(directory).expanduser().resolve()
            if not path.exists():
                raise ModelFormatError(f"ATTNVIZ_MODEL_DIRS: {path}: no such directory or file")
            name = path.stem if path.suffix.lower() == ".gguf" else path.name
            if name in entries:
                raise ModelFormatError(
                    f"ATTNVIZ_MODEL_DIRS: two models are named {name!r} "
                    f"({entries[name].path} and {path}); rename a folder"
                )
            entries[name] = ModelEntry(name, path, str(path), queued_at=now)
        self._entries = entries
        self._cache_dir = cache_dir or default_cache_dir()
        self._placement = placement
        self._cancel = threading.Event()
        self._done = threading.Event()
        if not entries:
            self._done.set()

    @staticmethod
    def _named(text: str, known: dict[str, Any], now: float) -> ModelEntry:
        """One entry of ``models``: a packaged name, a path, or a Hugging Face id."""
        if text in known:
            path = known[text].locate()
            if path is None:
                raise ModelFormatError(
                    f"ATTNVIZ_MODELS: the packaged model {text!r} is not installed; "
                    f"{PRETRAINED_EXTRA}"
                )
            return ModelEntry(text, path, known[text].source(), queued_at=now)
        local = Path(text).expanduser()
        if path_exists(local):
            path = local.resolve()
            name = path.stem if path.suffix.lower() == ".gguf" else path.name
            return ModelEntry(name or str(path), path, str(path), queued_at=now)
        hub = parse_hub_id(text)
        if hub is None:
            raise ModelFormatError(
                f"ATTNVIZ_MODELS: {shown_name(text)} is neither a packaged model "
                f"({', '.join(known)}), an existing directory or .gguf file, nor a Hugging "
                f"Face id ({ID_RULE})"
            )
        return ModelEntry(str(hub), Path(hub.repo), f"Hugging Face {hub}", queued_at=now, hub=hub)

    def load(self, after_each: Callable[[], object] | None = None) -> None:
        """Load every model still loading, in order, and run a short input through each.

        A model that cannot be loaded becomes "failed" with the reason; the others go on.
        ``after_each`` runs after each model (the server hands the memory a load freed,
        a float32 checkpoint cast to bfloat16 for one, back to the system).
        Loaders run one at a time (a lock): a loader left from an earlier configuration
        finishes before the next starts, and signals only its own configuration's end.
        """
        done, cancel, entries = self._done, self._cancel, list(self._entries.values())
        try:
            with _LOADING:
                self._load(entries, cancel, after_each)
        finally:
            done.set()

    def _load(
        self,
        entries: list[ModelEntry],
        cancel: threading.Event,
        after_each: Callable[[], object] | None = None,
    ) -> None:
        for entry in entries:
            if cancel.is_set():
                return
            if entry.state != "loading":
                continue
            try:
                if entry.hub is not None:  # the cached (or downloaded) snapshot folder
                    entry.path = resolve_hub_model(entry.hub)
                    entry.source = hub_source(entry.hub, entry.path)
                model = load_model(
                    entry.name, entry.path, self._cache_dir, entry.source, self._placement
                )
                model.warm_up()
            except ImportError as error:
                entry.state, entry.error = "failed", f"{error}: {PRETRAINED_EXTRA}"
            except Exception as error:
                entry.state, entry.error = "failed", str(error) or type(error).__name__
            else:
                entry.model, entry.state = model, "ready"
            if after_each is not None:
                after_each()

    def start(self, after_each: Callable[[], object] | None = None) -> threading.Thread:
        """Load in a background thread (daemon: a server shutting down does not wait)."""
        thread = threading.Thread(
            target=self.load, args=(after_each,), name="attnviz-model-loader", daemon=True
        )
        self._thread = thread
        thread.start()
        return thread

    def stop(self, timeout_s: float = 120.0) -> None:
        """Load no further model and wait for the one loading (server shutdown).

        A model cannot be stopped halfway; waiting for it keeps the interpreter from
        exiting while the loader thread is inside torch.
        """
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until loading has finished (ready or failed); False on timeout."""
        return self._done.wait(timeout_s)

    def entries(self) -> list[ModelEntry]:
        """Every model on offer, the default first."""
        return list(self._entries.values())

    def names(self) -> list[str]:
        """Names of the models on offer, the default first."""
        return list(self._entries)

    def models(self) -> list[LoadedModel]:
        """The models loaded so far, in order."""
        return [e.model for e in self._entries.values() if e.model is not None]

    def get(self, name: str | None) -> LoadedModel:
        """The model called ``name``, or the default (the first) for None.

        Raises:
            AttentionInputError: (field ``model``) no such model, none installed, or it
                failed to load (the reason).
            ModelNotReady: it is still loading.
        """
        if not self._entries:
            raise AttentionInputError(
                "model", f"no pretrained model is installed; {PRETRAINED_EXTRA}"
            )
        entry = self._entries.get(name) if name is not None else next(iter(self._entries.values()))
        if entry is None:
            raise AttentionInputError(
                "model", f"unknown model {name!r}; choose one of {', '.join(self._entries)}"
            )
        if entry.state == "failed":
            raise AttentionInputError(
                "model", f"model {entry.name!r} failed to load: {entry.error}"
            )
        if entry.model is None:
            raise ModelNotReady(entry.name, time.monotonic() - entry.queued_at)
        return entry.model

    def first_of(self, modality: str) -> str:
        """The name of the first ready model reading ``modality`` ("speech", "image").

        Raises:
            AttentionInputError: (field ``model``) none on offer reads it.
            ModelNotReady: none is ready yet, and one still loading may read it.
        """
        for entry in self._entries.values():
            if entry.model is not None and entry.model.modality == modality:
                return entry.name
        loading = [e for e in self._entries.values() if e.state == "loading"]
        if loading:
            raise ModelNotReady(loading[0].name, time.monotonic() - loading[0].queued_at)
        raise AttentionInputError(
            "model", f"no model on offer reads {modality}; name one in ATTNVIZ_MODEL_DIRS"
        )

    def add(self, model: LoadedModel) -> None:
        """Offer a model loaded elsewhere (:func:`.loading.wrap_model`), ready at once.

        Raises:
            ModelFormatError: a model of that name is already on offer.
        """
        if model.name in self._entries:
            raise ModelFormatError(f"two models are named {model.name!r}; pass name= to wrap_model")
        self._entries[model.name] = ModelEntry(
            model.name, model.path, model.source, state="ready", model=model,
            queued_at=time.monotonic(),
        )  # fmt: skip

    def clear(self) -> None:
        """Forget every model (they stay cached in :func:`.loading.load_model`)."""
        self._entries = {}


MODELS = ModelRegistry()
"""The process-wide registry, configured by :func:`attnviz.server.main.lifespan`."""
