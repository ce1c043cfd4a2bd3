"""``python -m attnviz``: serve AttnViz with uvicorn on ATTNVIZ_HOST:ATTNVIZ_PORT."""

from .cli.serve import serve

if __name__ == "__main__":
    serve()
