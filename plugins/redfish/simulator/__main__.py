"""`python -m plugins.redfish.simulator`: same as `devicectl bmc-sim`."""

import sys

from plugins.redfish.simulator.cli import main

sys.exit(main())
