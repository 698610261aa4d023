"""`python -m bmcsim`: same as `devicectl bmc-sim`."""

import sys

from bmcsim.cli import main

sys.exit(main())
