"""Known bytes between rank pairs: ``python pair_bytes.py OUT.json [STREAM_DIR]``.

Five supersteps in which rank r puts 10 * (r + 1) float64 (80 * (r + 1) bytes) to rank
r + 1 (mod P), then one in which a mailbox (direct routing) sends 1000 int64 records from rank r
to rank r - 1 (mod P).  Each rank writes ``OUT.json.rankR`` (JSON: ``bsp.ledger.bytes_to`` and
the ledger's total ``bytes_out``); the ledger is saved to OUT.json (streamed into STREAM_DIR
first when given)."""
import json
import sys

import numpy as np

import hpcbsp


def main() -> None:
    with hpcbsp.BSP() as bsp:
        if len(sys.argv) > 2:
            bsp.ledger.stream(sys.argv[2])
        p, me = bsp.nprocs, bsp.pid
        a = bsp.coarray(100, np.float64)
        box = bsp.mailbox(lambda values: None, np.int64, routing="direct")
        for _ in range(5):
            a.put((me + 1) % p, np.ones(10 * (me + 1)), 0)
            bsp.sync("ring")
        box.send(np.full(1000, (me - 1) % p), np.arange(1000))
        bsp.sync("mailbox")
        with open(f"{sys.argv[1]}.rank{me}", "w") as fh:
            json.dump({"bytes_to": bsp.ledger.bytes_to.tolist(), "bytes_out": bsp.ledger.totals()["bytes_out"]}, fh)
        bsp.ledger.save(sys.argv[1])


if __name__ == "__main__":
    main()
