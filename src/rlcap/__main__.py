"""``python -m rlcap`` (and ``torchrun ... -m rlcap``): the command line."""

import sys

from rlcap.cli import main

sys.exit(main())
