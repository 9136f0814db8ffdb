"""servers.markers: a test asking for a real server, itself or through another fixture, fails without the
`integration` marker, before the server starts; marked, or asking for none, it runs. The tests of a machine-wide
server are one pytest-xdist group."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from servers.markers import MACHINE_GROUP

pytest_plugins = ["pytester"]

CONFTEST = '''
from pathlib import Path

import pytest
from servers import machine_wide_fixture, server_fixture

pytest_plugins = ["servers.markers"]

@machine_wide_fixture
def markers_test_pool():
    yield "pool"

@server_fixture
def markers_test_server():
    with open(Path.cwd() / "started", "a") as started:
        started.write("started\\n")
    yield "server"

@pytest.fixture
def client(markers_test_server):
    return markers_test_server
'''

TESTS = '''
import pytest

def test_direct_unmarked(markers_test_server):
    pass

def test_through_a_fixture_unmarked(client):
    pass

@pytest.mark.integration
def test_direct_marked(markers_test_server):
    assert markers_test_server == "server"

def test_no_server():
    pass

@pytest.mark.integration
def test_pool(markers_test_pool):
    pass
'''


def _case(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Path]:
    pytester.makeini("[pytest]\nmarkers =\n    integration: a real server\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_markers_case=TESTS)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--strict-markers", *args), pytester.path / "started"


def test_unmarked_tests_asking_for_a_server_fail_before_it_starts(pytester: pytest.Pytester) -> None:
    result, started = _case(pytester)
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_direct_unmarked*",
        "asks for the real server fixture(s) markers_test_server without @pytest.mark.integration*",
        "*ERROR at setup of test_through_a_fixture_unmarked*",
        "asks for the real server fixture(s) markers_test_server without @pytest.mark.integration*",
    ])
    assert started.read_text() == "started\n"  # once, for the marked test


def test_setup_plan_finds_them_without_starting_anything(pytester: pytest.Pytester) -> None:
    result, started = _case(pytester, "--setup-plan")
    result.stdout.fnmatch_lines(["ERROR*::test_direct_unmarked*", "ERROR*::test_through_a_fixture_unmarked*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED and not started.exists()


def test_the_tests_of_a_machine_wide_server_are_one_xdist_group(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    integration: a real server\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_markers_case=TESTS)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))  # `servers`, for the workers
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v")
    # A test's xdist group shows as `::name@group` (the summary's "@pytest.mark..." is not one: CI's wide terminal
    # printed it whole).
    grouped = {match.groups() for match in re.finditer(r"::(test_\w+)@([\w-]+)", "\n".join(result.outlines))}
    assert grouped == {("test_pool", MACHINE_GROUP)}, result.outlines
