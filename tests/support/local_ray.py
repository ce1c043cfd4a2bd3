"""A local Ray for the Ray tests, started again when Ray's own start-up wait runs out."""

from __future__ import annotations

from typing import Any

STARTS = 3
"""How many times a local Ray is started before its start-up error is the test's."""


def start_local_ray(**options: Any) -> Any:
    """``ray.init(**options)``, tried up to :data:`STARTS` times.

    Ray waits a fixed 30 s for its raylet to register with the GCS (``ray._private.node``,
    not configurable) and then raises "The current node timed out during startup": on a
    busy 2-core machine (the whole suite beside the image build) that wait ran out. Any
    other error is raised at once.

    Returns:
        What ``ray.init`` returns.
    """
    import ray

    for start in range(1, STARTS + 1):
        try:
            return ray.init(**options)
        except Exception as error:  # Ray raises a bare Exception for this one
            if "timed out during startup" not in str(error) or start == STARTS:
                raise
            ray.shutdown()
    raise AssertionError("unreachable")
