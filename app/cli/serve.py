"""``attnviz serve``: the page and the API, with uvicorn or on Ray Serve."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .common import DefaultsShown, name_models


def serve(
    host: str | None = None, port: int | None = None, workers: int = 1, reload: bool = False
) -> None:
    """Serve the page and the API with uvicorn (``python -m attnviz``, ``attnviz serve``).

    Args:
        host, port: where to listen; None takes ATTNVIZ_HOST / ATTNVIZ_PORT
            (default 127.0.0.1:8000).
        workers: uvicorn worker processes.
        reload: restart on code changes.

    Once uvicorn has shut down (the app's lifespan has released the models, the pool and
    the kept passes), the process ends at once, without tearing the interpreter down: in a
    container the server is PID 1, which ignores the SIGTERM uvicorn raises again, and the
    teardown of torch and the models took 4 s on a busy 2-core machine and over 10 s on CI
    (the engine's SIGKILL). ``docker stop`` then takes well under a second
    (scripts/docker_check.py checks it).
    """
    import uvicorn

    from ..server.settings import get_settings

    settings = get_settings()
    # AttnViz writes its own JSON access log (server.middleware); uvicorn's would repeat it.
    uvicorn.run(
        "attnviz.server.main:app",
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        reload=reload,
        access_log=False,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(args: argparse.Namespace) -> None:
    """Serve the page and the API; ``--model`` models come first (the default).

    With uvicorn, or with ``--ray`` on Ray Serve (:func:`attnviz.server.ray_serve.serve_on_ray`:
    ``--replicas`` replicas of ``--num-cpus`` CPUs and ``--num-gpus`` GPUs each).
    """
    ray_only = {"replicas": args.replicas, "num_cpus": args.num_cpus, "num_gpus": args.num_gpus}
    if args.ray is None:
        given = [f"--{k.replace('_', '-')}" for k, v in ray_only.items() if v is not None]
        if given:
            verb = "needs" if len(given) == 1 else "need"
            raise SystemExit(f"attnviz: {' and '.join(given)} {verb} --ray")
        name_models(args.model)
        serve(args.host, args.port, args.workers, args.reload)
        return
    if args.workers != 1 or args.reload:
        raise SystemExit("attnviz: with --ray, --replicas replaces --workers (and no --reload)")
    name_models(args.model)  # the replicas get ATTNVIZ_MODELS with every ATTNVIZ_* setting
    from ..server.ray_serve import serve_on_ray
    from ..server.settings import get_settings

    settings = get_settings()
    try:
        serve_on_ray(
            args.ray or None,
            replicas=1 if args.replicas is None else args.replicas,
            host=args.host or settings.host,
            port=args.port or settings.port,
            num_cpus=1 if args.num_cpus is None else args.num_cpus,
            num_gpus=args.num_gpus or 0,
        )
    except (ValueError, ImportError, ConnectionError, RuntimeError) as error:
        raise SystemExit(f"attnviz: {error}") from None


def add_parser(commands: Any) -> None:
    """``serve`` and its options, on the main parser's subcommands."""
    parser = commands.add_parser(
        "serve", help="serve the page and the API", formatter_class=DefaultsShown
    )
    parser.add_argument(
        "--host", default=None, help="interface (default: ATTNVIZ_HOST or 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: ATTNVIZ_PORT or 8000)"
    )
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="a model to offer, repeatable, the first the default: a Hugging Face id "
        "(gpt2, org/name, org/name@revision; from the local cache with HF_HUB_OFFLINE=1), "
        "a packaged name or a local directory (added to ATTNVIZ_MODELS)",
    )
    parser.add_argument("--reload", action="store_true", help="restart on code changes")
    parser.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="serve on Ray Serve: replicas on the cluster at ADDRESS ('auto', HOST:6379 or "
        "ray://HOST:10001) or on a local Ray started for the purpose (no ADDRESS), behind "
        "Serve's HTTP proxy on --host/--port; needs pip install 'attnviz[ray]'",
    )  # fmt: skip
    parser.add_argument(
        "--replicas", type=int, default=None, help="with --ray: replicas (default 1)"
    )
    parser.add_argument(
        "--num-cpus", type=float, default=None,
        help="with --ray: CPUs each replica reserves, and its torch threads (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--num-gpus", type=float, default=None,
        help="with --ray: GPUs each replica reserves; over 1, one placement group on one "
        "node, the model placed across them by ATTNVIZ_DEVICE_MAP (default 0)",
    )  # fmt: skip
    parser.set_defaults(run=run)
