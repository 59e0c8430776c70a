"""``python -m hpcbsp.bench.fabsp``: the same as ``python -m hpcbsp.bench fabsp``."""
import sys

from . import main

sys.exit(main(sys.argv[1:]))
