"""``python -m attnviz``: serve AttnViz with uvicorn on ATTNVIZ_HOST:ATTNVIZ_PORT."""

import uvicorn

from .server.settings import get_settings


def main() -> None:
    """Start uvicorn with the settings' host and port (default 127.0.0.1:8000)."""
    settings = get_settings()
    # AttnViz writes its own JSON access log (attnviz.server.middleware); uvicorn's would repeat it.
    uvicorn.run("attnviz.server.main:app", host=settings.host, port=settings.port, access_log=False)


if __name__ == "__main__":
    main()
