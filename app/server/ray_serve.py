"""AttnViz on Ray Serve: the same app in replicas across a Ray cluster (issue 43).

Each replica is one Ray actor that builds the app of :mod:`attnviz.server.main` in its own
process (:func:`create_replica_app`, Serve's ``@serve.ingress`` with a builder function)
and runs its ``lifespan`` there: the compute pool, the caches and the pretrained models
are the replica's own, exactly as in one uvicorn process. Serve's HTTP proxy sends every
request (the page, the static files, the JSON API and the NDJSON streams) to a replica
and streams its answer back unchanged; only Serve's ``X-Request-ID`` header is added.

Three ways in:

* ``attnviz serve --ray [ADDRESS] --replicas N`` calls :func:`serve_on_ray`;
* ``serve run attnviz.server.ray_serve:app`` (and a KubeRay ``RayService``'s
  ``import_path``) takes :data:`app`, one replica built from the defaults and the
  ``ATTNVIZ_*`` environment of the process that imports it; a config's ``deployments:``
  entry named :data:`DEPLOYMENT_NAME` overrides its replicas, resources or autoscaling;
* ``serve run attnviz.server.ray_serve:app_builder replicas=2 num_gpus=1`` (or a
  config's ``args:``) calls :func:`app_builder` with :class:`RayServeArgs`.

Ray is the optional extra ``attnviz[ray]``: this module imports it only inside its
functions, and names the app factory by its import path (:data:`APP_FACTORY`), so that
importing it loads neither Ray nor the server.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ray.serve import Application
    from starlette.types import ASGIApp

APP_FACTORY: Final = "attnviz.server.main:create_app"
"""The app factory every replica calls (``module:function``), named by its import path."""
APP_NAME: Final = "attnviz"
"""The Serve application's name (:func:`serve_on_ray`)."""
DEPLOYMENT_NAME: Final = "AttnViz"
"""The ingress deployment's name: the key of a Serve config's ``deployments:`` entry."""
FORWARDED_PREFIX: Final = "ATTNVIZ_"
"""The driver's environment variables with this prefix are set in every replica."""
MAX_ONGOING_REQUESTS: Final = 100
"""Requests one replica takes at once (Serve's default is 5). The app queues its
computations in its own pool (:mod:`attnviz.server.executor`) and refuses what does not fit
(503, 413): Serve's limit only has to keep /healthz, the page and its static files from
waiting at the proxy behind a few long computations."""

PROXY_PATIENCE: Final = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60",
}
"""Serve's checks of its HTTP proxy, in seconds, for the controller :func:`serve_on_ray`
starts (``controller_options``' environment; a variable set in this process wins). Serve's
defaults (5 s to be ready, three misses) kill a proxy still starting on a busy machine,
and ``serve.start`` then fails with ``ActorDiedError``."""
PROXY_START_S: Final = 600
"""How long :func:`serve_on_ray` waits for Serve's proxy to answer, in seconds."""


def create_replica_app() -> ASGIApp:
    """The AttnViz app, built in the replica's process (Serve's ingress builder).

    Returns:
        ``attnviz.server.main.create_app()``: Serve runs its ``lifespan`` (compute pool,
        caches, model loading) when the replica starts, and its shutdown when it stops.
    """
    module, _, name = APP_FACTORY.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory()  # type: ignore[no-any-return]


def replica_env(env: Mapping[str, str] | None = None, num_cpus: float = 1) -> dict[str, str]:
    """The environment variables every replica gets (Ray's ``runtime_env`` ``env_vars``).

    Args:
        env: variables to set, over the forwarded ones; None: none beyond them.
        num_cpus: CPUs each replica reserves; ``ATTNVIZ_TORCH_THREADS`` is set to that
            many (at least 1) unless given, so that replicas sharing a node do not each
            run torch on every core.

    Returns:
        This process's ``ATTNVIZ_*`` variables, then ``env``, then the torch threads.
    """
    variables = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIX)}
    variables.update(env or {})
    variables.setdefault(f"{FORWARDED_PREFIX}TORCH_THREADS", str(max(1, math.floor(num_cpus))))
    return variables


def deployment_options(
    replicas: int | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    *,
    autoscaling: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``serve.deployment`` for :func:`build` (no Ray needed).

    Args and errors: those of :func:`build`.

    Returns:
        ``name``, ``num_replicas`` or ``autoscaling_config``, ``max_ongoing_requests``,
        ``ray_actor_options`` (``num_cpus``, ``num_gpus``, ``runtime_env``) and, for a
        replica of more than one GPU, ``placement_group_bundles`` (one bundle holding its
        CPUs and GPUs) with ``placement_group_strategy`` ``"STRICT_PACK"``.
    """
    if replicas is not None and autoscaling is not None:
        raise ValueError(
            "replicas and autoscaling: give one (autoscaling's initial_replicas, "
            "min_replicas and max_replicas say how many replicas run)"
        )
    if replicas is not None and replicas < 1:
        raise ValueError(f"replicas: {replicas} is below 1")
    if not (math.isfinite(num_cpus) and num_cpus >= 0):
        raise ValueError(f"num_cpus: {num_cpus} is not a number of CPUs (0 or more)")
    if not (math.isfinite(num_gpus) and num_gpus >= 0):
        raise ValueError(f"num_gpus: {num_gpus} is not a number of GPUs (0 or more)")
    if num_gpus > 1 and not float(num_gpus).is_integer():
        raise ValueError(f"num_gpus: {num_gpus}; Ray shares a GPU (0 to 1) or gives whole ones")
    if max_ongoing_requests < 1:
        raise ValueError(f"max_ongoing_requests: {max_ongoing_requests} is below 1")
    actor: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "runtime_env": {"env_vars": replica_env(env, num_cpus)},
    }
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": max_ongoing_requests,
        "ray_actor_options": actor,
    }
    if autoscaling is not None:
        options["autoscaling_config"] = dict(autoscaling)
    else:
        options["num_replicas"] = 1 if replicas is None else replicas
    if num_gpus > 1:
        # A model over several GPUs: the replica takes one bundle of all of them on one
        # node, so CUDA_VISIBLE_DEVICES lists them all in its process and accelerate's
        # device map (ATTNVIZ_DEVICE_MAP) places the model across them.
        bundle = {"CPU": num_cpus, "GPU": num_gpus}
        options["placement_group_bundles"] = [{k: v for k, v in bundle.items() if v > 0}]
        options["placement_group_strategy"] = "STRICT_PACK"
    return options


def build(
    replicas: int | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    *,
    autoscaling: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    env: Mapping[str, str] | None = None,
) -> Application:
    """The AttnViz app as a Serve application, bound and ready for ``serve.run``.

    Args:
        replicas: replicas to run (None: 1); leave it None with ``autoscaling``.
        num_cpus: CPUs each replica reserves (fractions share a core); also its torch
            threads (at least 1) unless ``ATTNVIZ_TORCH_THREADS`` is set.
        num_gpus: GPUs each replica reserves: a fraction shares one GPU, a whole number
            over 1 is a placement group of one bundle on one node (``STRICT_PACK``) that
            the replica takes whole; the model is placed within its GPUs as in one
            process (``ATTNVIZ_DEVICE``, ``ATTNVIZ_DEVICE_MAP``).
        autoscaling: Serve's ``autoscaling_config`` (``min_replicas``, ``max_replicas``,
            ``initial_replicas``, ``target_ongoing_requests``, ``upscale_delay_s``,
            ``downscale_delay_s``, ...) instead of a fixed number of replicas.
        max_ongoing_requests: requests one replica takes at once (more wait at the proxy).
        env: environment variables for the replicas, over this process's ``ATTNVIZ_*``
            ones (which every replica gets: the settings are the same everywhere).

    Returns:
        A ``ray.serve.Application`` whose one deployment, :data:`DEPLOYMENT_NAME`, is the
        ingress: each replica builds the app with :func:`create_replica_app`.

    Raises:
        ValueError: both ``replicas`` and ``autoscaling``; ``replicas`` below 1; a
            negative or non-finite ``num_cpus`` or ``num_gpus``; a fractional
            ``num_gpus`` over 1; ``max_ongoing_requests`` below 1.
        ImportError: Ray Serve is not installed (``pip install 'attnviz[ray]'``).
    """
    options = deployment_options(
        replicas,
        num_cpus,
        num_gpus,
        autoscaling=autoscaling,
        max_ongoing_requests=max_ongoing_requests,
        env=env,
    )
    serve = _import_serve()
    ingress = serve.ingress(create_replica_app)()
    return serve.deployment(ingress, **options).bind()  # type: ignore[no-any-return]


class RayServeArgs(BaseModel):
    """The arguments of :func:`app_builder` (``serve run ... key=value``, a config's ``args:``).

    Serve validates them into this model before it calls the builder.

    Attributes:
        replicas: a fixed number of replicas (left out with ``max_replicas``: 1).
        num_cpus: CPUs per replica.
        num_gpus: GPUs per replica.
        min_replicas: with ``max_replicas``, autoscaling's floor.
        max_replicas: turns autoscaling on: its ceiling.
        target_ongoing_requests: autoscaling's target of requests per replica.
        max_ongoing_requests: requests one replica takes at once.
    """

    model_config = ConfigDict(extra="forbid")

    replicas: int | None = Field(None, ge=1)
    num_cpus: float = Field(1, ge=0)
    num_gpus: float = Field(0, ge=0)
    min_replicas: int = Field(1, ge=0)
    max_replicas: int | None = Field(None, ge=1)
    target_ongoing_requests: float = Field(2, gt=0)
    max_ongoing_requests: int = Field(MAX_ONGOING_REQUESTS, ge=1)


def app_builder(args: RayServeArgs | Mapping[str, Any]) -> Application:
    """Serve's application builder: :func:`build` from :class:`RayServeArgs`.

    ``serve run attnviz.server.ray_serve:app_builder max_replicas=4 num_gpus=1``
    autoscales from 1 to 4 one-GPU replicas; a RayService's ``args:`` give the same keys.

    Args:
        args: Serve's ``key=value`` strings (a mapping), validated here, or the model.

    Returns:
        :func:`build`'s application.

    Raises:
        pydantic.ValidationError: an unknown key or a value out of range.
        ValueError: both ``replicas`` and ``max_replicas``, and :func:`build`'s errors.
    """
    args = RayServeArgs.model_validate(args)
    autoscaling = None
    if args.max_replicas is not None:
        autoscaling = {
            "min_replicas": args.min_replicas,
            "max_replicas": args.max_replicas,
            "target_ongoing_requests": args.target_ongoing_requests,
        }
    return build(
        args.replicas,
        args.num_cpus,
        args.num_gpus,
        autoscaling=autoscaling,
        max_ongoing_requests=args.max_ongoing_requests,
    )


def serve_on_ray(
    address: str | None = None,
    replicas: int = 1,
    host: str = "127.0.0.1",
    port: int = 8000,
    num_cpus: float = 1,
    num_gpus: float = 0,
    blocking: bool = True,
) -> str:
    """Serve AttnViz on Ray Serve: ``replicas`` replicas behind Serve's HTTP proxy.

    Connects to the Ray cluster at ``address`` (or starts a local one), starts Serve's
    proxy on ``host``:``port``, deploys :func:`build`'s application as :data:`APP_NAME` at
    ``/`` (waiting until every replica has started), prints where it answers and, when
    ``blocking``, serves until Ctrl-C. Then it deletes the application; a local Ray started
    here is shut down with Serve.

    Args:
        address: the cluster: ``"auto"`` (the one started on this machine by ``ray
            start``, or ``RAY_ADDRESS``), ``"HOST:6379"`` (its head's GCS), or
            ``"ray://HOST:10001"`` (Ray Client); None starts a local Ray for the purpose
            (no dashboard) and stops it after. A Ray already initialised in this process
            is used as it is.
        replicas: replicas of the app (each loads its own models).
        host: the interface Serve's proxy listens on (``0.0.0.0``: every interface).
        port: its TCP port. Serve's HTTP options are cluster-wide: on a cluster where
            Serve already runs, its host and port stay as they are.
        num_cpus: CPUs each replica reserves (and its torch threads, at least 1).
        num_gpus: GPUs each replica reserves (see :func:`build`).
        blocking: serve until Ctrl-C (True), or return once the replicas are up, leaving
            Ray and Serve running (False; ``serve.shutdown()`` and ``ray.shutdown()`` stop
            them).

    Returns:
        The base URL (``http://HOST:PORT``) Serve's proxy answers at.

    Raises:
        ValueError: :func:`build`'s errors.
        ImportError: Ray is not installed (``pip install 'attnviz[ray]'``).
        ConnectionError: no cluster answers at ``address``.
        RuntimeError: a replica failed to start (its error is in the message), or
            Serve's proxy did not answer within :data:`PROXY_START_S`.
    """
    application = build(replicas, num_cpus, num_gpus)  # the driver's environment, now
    import ray
    from ray import serve

    started_here = not ray.is_initialized() and address is None
    if not ray.is_initialized():
        # "local": a new Ray, never one found on this machine (address None would join it).
        local: dict[str, Any] = {"include_dashboard": False} if started_here else {}
        ray.init(address=address or "local", **local)
    url = f"http://{host}:{port}"
    patience = {k: os.environ.get(k, v) for k, v in PROXY_PATIENCE.items()}
    try:
        try:
            serve.start(
                http_options={"host": host, "port": port},
                controller_options={"runtime_env": {"env_vars": patience}},
            )
        except TimeoutError:  # its proxy not ready in Serve's fixed 60 s: still starting
            serve.start(http_options={"host": host, "port": port})  # the controller above
        serve.run(application, name=APP_NAME, route_prefix="/")
        _wait_for_proxy(url, PROXY_START_S)
    except BaseException:
        _stop(started_here)
        raise
    gpus = f", {num_gpus:g} GPUs" if num_gpus else ""
    until = "; Ctrl-C stops it" if blocking else ""
    plural = "" if replicas == 1 else "s"
    print(
        f"AttnViz on Ray Serve at {url}/ ({replicas} replica{plural} of {num_cpus:g} CPUs{gpus})"
        f"{until}",
        flush=True,
    )
    if not blocking:
        return url
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        _stop(started_here)
    return url


def _wait_for_proxy(url: str, timeout_s: float) -> None:
    """Wait until Serve's proxy at ``url`` answers its health check (``/-/healthz``).

    Raises:
        RuntimeError: it did not answer 200 within ``timeout_s`` seconds.
    """
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/-/healthz", timeout=10) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"Serve's proxy at {url} did not answer within {timeout_s:g} s")
        time.sleep(0.5)


def _stop(started_here: bool) -> None:
    """Delete the application; with a Ray started here, stop Serve and Ray too."""
    import ray
    from ray import serve

    try:
        serve.delete(APP_NAME)
    finally:
        if started_here:
            serve.shutdown()  # type: ignore[no-untyped-call]
            ray.shutdown()


def _import_serve() -> Any:
    """``ray.serve``, or an ImportError saying which extra installs it."""
    try:
        from ray import serve
    except ImportError as error:
        raise ImportError(
            "Ray Serve is not installed: pip install 'attnviz[ray]' (ray[serve])"
        ) from error
    return serve


def __getattr__(name: str) -> Any:
    """``app``, built when first asked for: :func:`build`'s application of the defaults.

    It is what ``serve run attnviz.server.ray_serve:app`` and a RayService's
    ``import_path`` deploy: one replica with this process's ``ATTNVIZ_*`` environment.
    """
    if name == "app":
        application = build()
        globals()["app"] = application
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
