"""``python -m doctor.daemon.catalog``: the golden list of exported metrics, on stdout."""

import sys

from doctor.daemon.catalog import golden

sys.stdout.write(golden())
