"""``python -m memoryd``: the same as the ``memoryd`` command."""

from .cli import main

main()
