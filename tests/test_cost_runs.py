"""RUNS.csv reading and its one-line errors; worker-list expansion."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.klist import parse_workers
from hpcbsp.cost.runs import read_runs, write_runs


def write(tmp_path, text: str):
    path = tmp_path / "RUNS.csv"
    path.write_text(text)
    return path


def test_reads_columns_in_any_order_with_extras(tmp_path):
    path = write(tmp_path, "# a comment\nseconds,rep,workers,list_length\n0.5,0,1,100\n\n0.26,0,2,100\n0.27,1,2,100\n")
    runs = read_runs(path)
    np.testing.assert_array_equal(runs.workers, [1, 2, 2])
    np.testing.assert_array_equal(runs.seconds, [0.5, 0.26, 0.27])
    assert runs.list_length() == 100
    assert {k: list(v) for k, v in runs.by_workers().items()} == {1: [0.5], 2: [0.26, 0.27]}


def test_write_then_read(tmp_path):
    rows = [{"workers": 1, "seconds": 0.125, "repeat": 0}, {"workers": 3, "seconds": np.float64(1 / 3), "repeat": 1}]
    write_runs(tmp_path / "r.csv", rows)
    runs = read_runs(tmp_path / "r.csv")
    np.testing.assert_array_equal(runs.seconds, [0.125, 1 / 3])  # repr keeps every bit


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("workers,time\n1,2\n", "lacks column"),
    ("workers,seconds\n", "no data rows"),
    ("workers,seconds\n1,fast\n", ":2: seconds is not a number"),
    ("workers,seconds\n1,-0.5\n", "negative time"),
    ("workers,seconds\n1,0\n", "must be > 0"),
    ("workers,seconds\n1.5,1\n", "integer >= 1"),
    ("workers,seconds\n0,1\n", "integer >= 1"),
    ("workers,seconds\n1\n", "fields"),
    ("workers,seconds\n1,inf\n", "finite"),
])
def test_bad_files_give_one_line(tmp_path, text, message):
    with pytest.raises(CostInputError, match=message) as info:
        read_runs(write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(CostInputError, match="cannot read"):
        read_runs(tmp_path / "nope.csv")


@pytest.mark.parametrize("text, expected", [
    ("1,2,4,...,64", [1, 2, 4, 8, 16, 32, 64]),
    ("1,2,4,...,100", [1, 2, 4, 8, 16, 32, 64, 100]),
    ("1,2,...,5", [1, 2, 3, 4, 5]),
    ("2,4,...,10", [2, 4, 6, 8, 10]),
    ("3-5,1", [1, 3, 4, 5]),
    ("8", [8]),
])
def test_worker_lists(text, expected):
    assert parse_workers(text) == expected


@pytest.mark.parametrize("text", ["", "a,b", "1,...", "4,2,...,8", "0,1", "5-3", "1.5", "inf", "nan", "1,2,...,inf",
                                  "١"])
def test_bad_worker_lists(text):
    with pytest.raises(CostInputError):
        parse_workers(text)
