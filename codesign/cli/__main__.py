"""``python -m codesign.cli``: the ``codesign`` command."""

import sys

from codesign.cli import main

sys.exit(main())
