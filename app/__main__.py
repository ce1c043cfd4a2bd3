"""``python -m attnviz``: serve AttnViz with uvicorn on ATTNVIZ_HOST:ATTNVIZ_PORT.

As ``attnviz serve`` (:func:`attnviz.cli.main`): Ctrl-C stops it with one line, no traceback.
"""

from .cli import main

if __name__ == "__main__":
    main(["serve"])
