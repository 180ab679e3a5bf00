"""``python -m inferproxy`` is the ``inferproxy`` command."""

from .cli import main

main()
