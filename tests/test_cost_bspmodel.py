"""The BSP superstep cost w + g·h + l against ledgers, with hand-computed cases."""
from __future__ import annotations

import json

import pytest

from hpcbsp.cli.cost import main
from hpcbsp.cost.bspmodel import compare, load_ledger
from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.profile import FORMAT, profile_from_dict
from hpcbsp.runtime.superstep.ledger import write_records

PROFILE = {
    "format": FORMAT, "nprocs": 2, "r_flops": 1e9, "l_empty": 1e-5,
    "regimes": [{"name": "words", "message_bytes": [8, 8], "g": 1e-7, "l": 1e-4},
                {"name": "blocks", "message_bytes": [512, 1 << 20], "g": 1e-9, "l": 5e-5}],
}


def rec(rank, index, work, sync, bout, bin_, mout, min_, label=None):
    return {"rank": rank, "index": index, "label": label, "work_s": work, "sync_s": sync, "bytes_out": bout,
            "bytes_in": bin_, "msgs_out": mout, "msgs_in": min_, "start_s": 0.0}


RECORDS = [
    # superstep 0: 10 single words from rank 0 to rank 1 -> words regime
    rec(0, 0, 2e-3, 1e-3, 80, 0, 10, 0, "small"), rec(1, 0, 1e-3, 2.5e-3, 0, 80, 0, 10, "small"),
    # superstep 1: one 1 MB block each way -> blocks regime
    rec(0, 1, 1e-3, 3e-3, 1 << 20, 1 << 20, 1, 1, "big"), rec(1, 1, 4e-3, 1e-3, 1 << 20, 1 << 20, 1, 1, "big"),
    # superstep 2: nothing moves -> w + l_empty
    rec(0, 2, 5e-4, 1e-4, 0, 0, 0, 0), rec(1, 2, 2e-4, 3e-4, 0, 0, 0, 0),
]


def test_hand_computed_supersteps():
    doc = compare(RECORDS, profile_from_dict(PROFILE))
    s0, s1, s2 = doc["supersteps"]
    assert s0["regime"] == "words" and s0["predicted_s"] == pytest.approx(2e-3 + 1e-7 * 80 + 1e-4)
    assert s0["measured_s"] == pytest.approx(3.5e-3)
    assert s1["regime"] == "blocks" and s1["predicted_s"] == pytest.approx(4e-3 + 1e-9 * (1 << 20) + 5e-5)
    assert s1["measured_s"] == pytest.approx(5e-3)
    assert s2["regime"] == "empty" and s2["predicted_s"] == pytest.approx(5e-4 + 1e-5)
    assert s2["measured_s"] == pytest.approx(6e-4)
    pred = [s0["predicted_s"], s1["predicted_s"], s2["predicted_s"]]
    meas = [3.5e-3, 5e-3, 6e-4]
    errors = [100 * (p - m) / m for p, m in zip(pred, meas)]
    summary = doc["summary"]
    assert summary["mape"] == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert summary["total_error_pct"] == pytest.approx(100 * (sum(pred) - sum(meas)) / sum(meas))
    assert summary["by_label"]["big"]["supersteps"] == 1 and "note" not in summary


def test_a_superstep_with_only_local_records_costs_l_local():
    """h = 0 but a rank had records (a put to itself): the exchange ran there, so the superstep
    costs w + l_local, not the control step's l_empty; without l_local in the profile, the l of
    its smallest-message regime stands in; ledgers without ``records`` read as before."""
    local = [dict(rec(0, 0, 5e-4, 1e-4, 0, 0, 0, 0), records=2), dict(rec(1, 0, 2e-4, 3e-4, 0, 0, 0, 0), records=0)]
    with_local = profile_from_dict({**PROFILE, "l_local": 3e-5})
    (s,) = compare(local, with_local)["supersteps"]
    assert s["regime"] == "local" and s["predicted_s"] == pytest.approx(5e-4 + 3e-5)
    (s,) = compare(local, profile_from_dict(PROFILE))["supersteps"]
    assert s["regime"] == "local" and s["predicted_s"] == pytest.approx(5e-4 + 1e-4)  # the words l
    (s,) = compare([{k: v for k, v in r.items() if k != "records"} for r in local], with_local)["supersteps"]
    assert s["regime"] == "empty" and s["predicted_s"] == pytest.approx(5e-4 + 1e-5)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_cli_reads_ledgers_the_runtime_writes(tmp_path, capsys, suffix):
    ledger = str(tmp_path / f"run{suffix}")
    write_records(ledger, RECORDS, 2)
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(PROFILE))
    assert len(load_ledger(ledger)) == len(RECORDS)
    assert main(["ledger", ledger, "--profile", str(prof), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["index"] for s in doc["supersteps"]] == [0, 1, 2]
    assert main(["ledger", ledger, "--profile", str(prof)]) == 0
    assert "w + g·h + l" in capsys.readouterr().out


def test_bad_ledger_and_profile(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"records": [{"rank": 0}]}))
    with pytest.raises(CostInputError, match="lacks"):
        load_ledger(bad)
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"format": "other"}))
    assert main(["ledger", str(bad), "--profile", str(prof)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
