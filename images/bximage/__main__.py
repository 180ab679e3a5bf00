"""``PYTHONPATH=images python -m bximage toolkit [CACHE_DIR]``: build (or find) the toolkit
image layout and print its path and digest."""

import sys
from pathlib import Path

from bximage import toolkit


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "toolkit":
        print("usage: python -m bximage toolkit [CACHE_DIR]", file=sys.stderr)
        return 2
    cache = Path(argv[1]) if len(argv) > 1 else toolkit.default_cache()
    image = toolkit.build(cache)
    print(f"{image.layout} {image.digest}")
    return 0


sys.exit(main(sys.argv[1:]))
