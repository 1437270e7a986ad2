"""``python -m tinycore``: the same command line as the ``tinycore`` script (see :mod:`tinycore.cli`)."""

import sys

from tinycore.cli import main

sys.exit(main())
