"""``python -m toolkit`` is ``bx-tool``."""

import sys

from toolkit.main import main

sys.exit(main())
