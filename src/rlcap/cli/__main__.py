import sys

from rlcap.cli import main

sys.exit(main())
