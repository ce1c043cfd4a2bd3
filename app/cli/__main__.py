"""``python -m attnviz.cli``: the ``attnviz`` command."""

from . import main

main()
