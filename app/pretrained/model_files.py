"""A model's files on disk: checked readable before loading, cache folders published whole.

:func:`check_readable` names the real cause of a path that cannot be loaded (missing, no
``config.json``, permission denied); :func:`published` writes a cache folder so that no
reader ever sees it half written, whoever else writes it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .loaded import ModelFormatError


def check_readable(path: Path) -> None:
    """Refuse a model path this process cannot read, naming the path and the real cause.

    Walks a directory that holds a ``config.json`` (its files, and the folders down to
    them) or checks one file, as the process's own user: a cache written as root with mode
    0600 (safetensors writes its files so) and read by another user is "permission
    denied", not "missing".

    Raises:
        ModelFormatError: the path does not exist ("missing"), is a folder with no
            ``config.json`` at its top ("no config.json in it"), or a file or folder of it
            cannot be read by this user ("permission denied", with its mode, owner and
            this process's uid).
    """
    if not path.exists():
        raise ModelFormatError(f"{path}: missing: no such directory or file")
    paths = [path]
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise ModelFormatError(_denied(path))
        # a model folder has its config.json at the top: look there before walking it (a
        # path such as / or a home folder would otherwise be walked whole, minutes long)
        if not (path / "config.json").is_file():
            raise ModelFormatError(
                f"{path}: no config.json in it: not a Hugging Face model folder (give the "
                "folder that holds config.json, or a .gguf file)"
            )
        paths += sorted(path.rglob("*"))
    for item in paths:
        wanted = os.R_OK | os.X_OK if item.is_dir() else os.R_OK
        if not os.access(item, wanted):
            raise ModelFormatError(_denied(item))


def _denied(path: Path) -> str:
    """The message of a path this process may not read: its mode and owner, and who asks."""
    info = path.stat()
    return (
        f"{path}: permission denied: mode {stat.filemode(info.st_mode)} "
        f"({info.st_mode & 0o777:o}), owner uid {info.st_uid}, and this process runs as uid "
        f"{os.getuid()}; make it readable (chmod -R a+rX) or run as its owner"
    )


def load_error(path: Path, error: BaseException) -> ModelFormatError:
    """A loader's failure as a :class:`.model.ModelFormatError` naming the real cause and path.

    "permission denied" and "missing" come from the OS error (with the file it names);
    a weights file that cannot be parsed (safetensors' header, a truncated file, a pickle)
    is "corrupt"; anything else is "transformers cannot load it" with the error.
    """
    where = Path(getattr(error, "filename", None) or path)
    if isinstance(error, PermissionError):
        return ModelFormatError(_denied(where) if where.exists() else f"{where}: permission denied")
    if isinstance(error, FileNotFoundError):
        return ModelFormatError(f"{where}: missing: {error.strerror or error}")
    text = str(error)
    corrupt = ("deserializ", "header", "invalid load key", "unexpected end", "truncated")
    if type(error).__name__ == "SafetensorError" or any(c in text.lower() for c in corrupt):
        return ModelFormatError(f"{path}: corrupt: {type(error).__name__}: {text}")
    return ModelFormatError(f"{path}: transformers cannot load it: {text}")


def share_modes(folder: Path) -> None:
    """Give every file and folder under ``folder`` the modes the process's umask allows.

    safetensors writes its files with mode 0600 whatever the umask: a cache filled by one
    user (a container image's build, as root) would be unreadable by another (the
    image's user). Files get 0666 and folders 0777, less the umask (0644 and 0755 with
    the usual 022).
    """
    mask = _umask()
    for item in [folder, *folder.rglob("*")]:
        mode = 0o777 if item.is_dir() else 0o666
        item.chmod(mode & ~mask)


def published(folder: Path, write: Callable[[Path], None]) -> None:
    """Write a cache folder whole or not at all, once, whoever else writes it at the same time.

    Writers of one folder take turns (:func:`writer_lock`, a lock file beside it): a second
    process converting the same model, a replica on one cache volume or a test worker,
    waits for the first and then finds its folder, instead of converting it again (a
    SmolLM2 dequantization is about 30 CPU-seconds). ``write(partial)`` fills a fresh
    folder beside ``folder`` (``<name>.partial-<random>``); its modes are shared
    (:func:`share_modes`) and it is renamed into place: a crash mid-write leaves no half
    cache behind. Where the lock is not shared (two machines on a network volume) and
    another writer got there first, its folder (the same conversion) is kept and this one
    removed.

    Raises:
        OSError: the cache directory cannot be written (the caller then converts into a
            temporary folder).
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(folder):
        if (folder / "config.json").is_file():  # written while this one waited its turn
            return
        partial = Path(tempfile.mkdtemp(prefix=folder.name + ".partial-", dir=folder.parent))
        try:
            write(partial)
            share_modes(partial)
            try:
                partial.rename(folder)
            except OSError:
                if not (folder / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)  # gone once renamed


@contextmanager
def writer_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of writing ``folder``: ``.<name>.lock`` beside it, ``flock``-ed.

    Blocks while another process (or thread) holds it; released when the block ends, or
    by the system when its holder dies. Where ``fcntl`` is missing (Windows) there is no
    lock and writers may convert side by side (:func:`published` still keeps one folder).

    Raises:
        OSError: the lock file cannot be created (a read-only cache directory).
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    with open(folder.parent / f".{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _umask() -> int:
    """The process's umask, read without changing it (Linux's /proc), else 022."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
