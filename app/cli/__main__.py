"""``python -m attnviz.cli``: the ``attnviz`` command."""

from . import main

if __name__ == "__main__":
    main()
