"""``python -m hpcbsp.bench.sync``: the same as ``python -m hpcbsp.bench sync``."""
import sys

from . import main

sys.exit(main(sys.argv[1:]))
