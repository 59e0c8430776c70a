"""A handler sends to a mailbox that is done; the job must end with that error, not hang.

Every rank finishes mailbox ``table`` (``done()``), then sends to mailbox ``late`` on rank 1,
whose handler sends to ``table``: a ``UsageError`` inside the handler on rank 1.
"""
import numpy as np

import hpcbsp


def prog(bsp):
    table = bsp.mailbox(lambda recs: None, np.int64, name="table")
    late = bsp.mailbox(lambda recs: table.send(0, recs), np.int64, name="late")
    table.send(0, [bsp.pid])
    table.done()
    late.send(1, [bsp.pid])
    bsp.sync()


hpcbsp.run(prog)
print("UNREACHABLE")
