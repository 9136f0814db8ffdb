"""`detail` is read as WMCore reads it: its own code (PyPI wmcore: Data.get for status, MSManager.info for info) and
rest/wmcore.py's `flag` over a table of values, as a client sends them (absent, a string, given twice)."""
from __future__ import annotations

from typing import Any, Union

import pytest

from MSUnmerged.rest.wmcore import flag
from wmcore_kit import ask

pytestmark = pytest.mark.slow  # on a new machine, the wmcore fixture installs WMCore first

# Each value of `detail` as WMCore's handlers get it from CherryPy: a string, a list when given more than once.
VALUES: list[Union[None, str, list[str]]] = [
    None, "true", "True", "TRUE", "tRuE", "false", "False", "FALSE", "fAlSe", "1", "0", "yes", "no", "on", "",
    " true", "true ", "t", "\u0442rue", ["true", "true"], ["true"], ["false", "true"]]

# Answers, per value, [status's detail, info's detail] as WMCore's code passes them on ("error": WMCore fails).
WMCORE = """
import json, sys, types
sys.modules["pycurl"] = types.ModuleType("pycurl")  # reached by MSManager's imports, never called by what runs here
from WMCore.MicroService.MSCore.MSManager import MSManager
from WMCore.MicroService.Service.Data import Data

class Unmerged:  # the manager, and its MSUnmerged: give back the detail they are called with
    def status(self, detail, **kwargs):
        return {"detail": detail}

    def getStatsFromMongoDB(self, detail=False, **kwargs):
        return {"detail": detail}

def status(query):
    return next(Data.get(types.SimpleNamespace(mgr=Unmerged()), API="status", **query))["detail"]

def info(query):
    manager = types.SimpleNamespace(services=["unmerged"], msUnmerged=Unmerged())
    try:
        return MSManager.info(manager, None, rse="T2_CH_CERN", **query)["detail"]
    except ValueError:  # strToBool: neither true nor false
        return "error"

print(json.dumps([[status(q), info(q)] for q in json.load(sys.stdin)]))
"""


def ours(value: Any, default: bool) -> bool:
    return flag({} if value is None else {"detail": value}, "detail", default)


def test_detail_is_true_where_wmcores_code_says_so(wmcore: str) -> None:
    theirs = ask(wmcore, WMCORE, [{} if v is None else {"detail": v} for v in VALUES])
    for value, (status, info) in zip(VALUES, theirs):
        assert ours(value, True) is status, f"status?detail={value!r}: WMCore {status}"
        # Where WMCore's info fails (a 500), ours answers as for false: never a 400 or 500 (docs/rest.md).
        assert ours(value, False) is (False if info == "error" else info), f"info?detail={value!r}: WMCore {info}"
    # The table holds both kinds of answer of each call.
    assert {s for s, _ in theirs} == {True, False} and {i for _, i in theirs} == {True, False, "error"}
