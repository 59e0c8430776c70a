"""Runtime pieces that need no second rank: one-rank BSP, ledger files, helpers."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import clean_env

import hpcbsp
from hpcbsp import UsageError
from hpcbsp.runtime.api.distribution import block_range, block_sizes
from hpcbsp.runtime.superstep.control import signature
from hpcbsp.runtime.superstep.ledgertext import per_superstep, summarize


def test_one_rank_program_and_ledger_files(tmp_path):
    with hpcbsp.BSP() as bsp:
        assert (bsp.pid, bsp.nprocs, bsp.superstep) == (0, 1, 0)
        x = bsp.coarray(5, dtype=np.float32)
        x.put(0, np.arange(3), offset=2)
        f = x.get(0, offset=1)
        q = bsp.queue(np.int16)
        q.send(0, [5, 6])
        bsp.sync("step-a")
        np.testing.assert_array_equal(x.local, [0, 0, 0, 1, 2])
        np.testing.assert_array_equal(f.value, [0, 0, 0, 0])  # read before the put landed
        np.testing.assert_array_equal(q.received(), [5, 6])
        bsp.sync()
        paths = [bsp.ledger.save(tmp_path / name) for name in ("l.json", "l.csv", "l.trace.json")]
    data = json.loads((tmp_path / "l.json").read_text())
    assert data["nprocs"] == 1 and [r["label"] for r in data["records"]] == ["step-a", None]
    assert data["records"][0]["bytes_out"] == 0  # a rank's traffic to itself is a local copy
    # step-a delivered three requests to this rank itself (a put, a get, a queue send); the
    # second sync had none: the control step alone (what the cost model's l_local/l_empty split on)
    assert [r["records"] for r in data["records"]] == [3, 0]
    rows = list(csv.DictReader(open(tmp_path / "l.csv")))
    assert [int(r["index"]) for r in rows] == [0, 1] and [int(r["records"]) for r in rows] == [3, 0]
    trace = json.loads((tmp_path / "l.trace.json").read_text())
    assert {e["cat"] for e in trace["traceEvents"]} == {"work", "sync"}
    assert all(p is not None for p in paths)


def test_bad_ledger_extension(tmp_path):
    with hpcbsp.BSP() as bsp:
        bsp.sync()
        with pytest.raises(ValueError, match="use a .json, .csv or .trace.json"):
            bsp.ledger.save(tmp_path / "ledger.txt")


def test_closed_context_refuses_collectives():
    bsp = hpcbsp.BSP()
    bsp.close()
    with pytest.raises(UsageError, match="closed"):
        bsp.sync()


def test_undelivered_puts_warn_at_close():
    with pytest.warns(UserWarning, match="never delivered"):
        with hpcbsp.BSP() as bsp:
            bsp.coarray(1).put(0, [1.0])


def test_allreduce_errors():
    with hpcbsp.BSP() as bsp:
        with pytest.raises(UsageError, match="not one of"):
            bsp.allreduce(1, op="mean")
        with pytest.raises(UsageError, match="numeric"):
            bsp.allreduce({"a": 1})
        x = np.zeros(4)
        for bad in (np.zeros(3), np.zeros(4, np.float32), np.zeros(8)[::2], x, [0.0] * 4):
            with pytest.raises(UsageError, match=r"out= must be a writeable C-contiguous array of shape \(4,\)"):
                bsp.allreduce(x, out=bad)
        with pytest.raises(UsageError, match="exact=True.* not into out="):
            bsp.allreduce(x, exact=True, out=np.zeros(4))


def test_per_superstep_combines_ranks():
    recs = [dict(rank=r, index=0, label="a", work_s=0.1 * (r + 1), sync_s=0.01, bytes_out=10 * r,
                 bytes_in=5, msgs_out=1, msgs_in=1, start_s=0.0) for r in range(3)]
    (step,) = per_superstep(recs)
    assert step["w_s"] == pytest.approx(0.3) and step["h_bytes"] == 20 and step["ranks"] == 3
    assert "on 3 ranks" in summarize(recs)


def test_signature_is_the_same_in_every_process():
    code = "from hpcbsp.runtime.superstep.control import signature; print(signature('coarray float64'))"
    # The rest of the environment stays: Open MPI's singleton does not start without HOME.
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=clean_env(PYTHONHASHSEED=str(seed))).stdout for seed in (1, 2)}
    assert outs == {f"{signature('coarray float64')}\n"}


@pytest.mark.parametrize("n,p", [(0, 3), (1, 3), (10, 3), (7, 7), (5, 8)])
def test_block_distribution_covers_range(n, p):
    sizes = block_sizes(n, p)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1
    ranges = [block_range(n, p, r) for r in range(p)]
    assert [hi - lo for lo, hi in ranges] == sizes.tolist()
    assert all(ranges[r][1] == ranges[r + 1][0] for r in range(p - 1))


def test_summary_with_a_cost_profile():
    class Flat:  # g = 1 ns/byte, l = 1 ms
        def superstep_cost(self, w, h_bytes, messages, local=False):
            return w + 1e-9 * h_bytes + 1e-3

    recs = [dict(rank=r, index=i, label=None, work_s=0.01, sync_s=0.001 + 1e-9 * 1000 * i,
                 bytes_out=1000 * i, bytes_in=1000 * i, msgs_out=1, msgs_in=1, start_s=0.0)
            for r in range(2) for i in range(3)]
    text = summarize(recs, profile=Flat())
    assert "predicted" in text
    # measured = w + sync = exactly the model's prediction here: zero error
    assert "mean error 0.0%" in text


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "2", True])
def test_sync_refuses_a_timeout_that_is_not_a_positive_number(bad):
    with hpcbsp.BSP() as bsp:
        with pytest.raises(UsageError, match=r"rank 0: sync\(label='s', timeout=.*positive number of seconds"):
            bsp.sync("s", timeout=bad)
        bsp.sync("s", timeout=np.float64(5))  # the context is still usable
        assert bsp.superstep == 1


def test_every_kind_of_failure_is_a_bsp_error_and_reported_by_its_kind():
    # Oracle: the report rules written in hpcbsp.runtime.failure.report (bad input once on rank 0 as one
    # line, a peer's failure as one line, a timeout as one line naming the program's line that
    # waited, anything else as a rank-prefixed traceback).
    from hpcbsp import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout
    from hpcbsp.fabsp.engine import PeerFailed as EnginePeerFailed
    from hpcbsp.runtime.failure.report import format_failure

    kinds = (UsageError, Divergence, PeerFailed, SyncTimeout, BadInput)
    assert all(issubclass(k, BSPError) for k in kinds)
    assert len({k for k in kinds for j in kinds if k is not j and issubclass(k, j)}) == 0, \
        "the kinds are siblings: catching one never catches another"
    assert EnginePeerFailed is PeerFailed  # the old import path still works
    assert format_failure(BadInput("checkpoint x is damaged"), 0, 2) == "[hpcbsp] error: checkpoint x is damaged\n"
    assert format_failure(BadInput("checkpoint x is damaged"), 1, 2) == ""
    assert format_failure(PeerFailed("stopping because rank 0 failed"), 1, 2) == \
        "[hpcbsp] rank 1/2: stopping because rank 0 failed\n"
    # Not the rank that reports it for the job: silent, as a divergence's other ranks are.
    assert format_failure(PeerFailed("stopping because rank 0 failed", reports=False), 2, 3) == ""
    try:
        raise SyncTimeout("rank 1: sync at superstep 4 timed out (ranks not arrived: 2 (on n3))")
    except BSPError as caught:
        line = sys._getframe().f_lineno - 2  # the raise: this file is the "program" here
        text = format_failure(caught, 1, 3)
    assert text == ("[hpcbsp] rank 1/3: sync at superstep 4 timed out (ranks not arrived: 2 (on n3)) "
                    f"(at {__file__}:{line} in test_every_kind_of_failure_is_a_bsp_error_and_reported_by_its_kind)\n")
    for exc in (Divergence("the ranks diverged"), UsageError("bad put")):
        try:
            raise exc
        except BSPError as caught:
            text = format_failure(caught, 1, 3)
        assert text.startswith("[hpcbsp] rank 1/3 failed:\n[rank 1] Traceback")
        assert text.rstrip().endswith(f"[rank 1] {type(exc).__module__}.{type(exc).__name__}: {exc}")


def test_the_extension_interface_on_one_rank():
    # Oracle: what the test registers and does, step by step.
    from hpcbsp.fabsp.engine import Engine
    from hpcbsp.runtime.api.extension import provided
    from hpcbsp.runtime.superstep.control import Kind

    calls = []
    with hpcbsp.BSP() as bsp:
        ext = bsp.extension
        assert ext.state == "open" and ext.coarrays() == [] and ext.sync_hook(Engine) is None
        a = bsp.coarray(2, name="a")
        bsp.queue(np.int64)
        b = bsp.coarray(3, name="b", scratch=True)
        assert ext.coarrays() == [a, b]  # in order, scratch included, queues not
        ext.agree(Kind.REGISTER, "thing <i8", lambda: "thing()")
        assert bsp.superstep == 0 and len(bsp.ledger) == 0  # a control step is not a superstep
        assert ext.check_pid(np.int32(0), "x.send") == 0
        with pytest.raises(UsageError, match=r"rank 0: x.send: pid 1 is not a rank"):
            ext.check_pid(1, "x.send")
        box = bsp.mailbox(lambda recs: None, np.int64)  # provided by hpcbsp.fabsp
        assert ext.sync_hook(Engine) is Engine.existing(bsp) and box.index == 0
        ext.add_close_hook(lambda: calls.append("closed"))
        bsp.sync()
    assert ext.state == "closed" and calls == ["closed"]
    with pytest.raises(UsageError, match="bsp.nothing is provided by a layer above the runtime"):
        provided("nothing")
