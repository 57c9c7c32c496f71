"""Runs ONE third-party test file as __main__ in this process and records every test's outcome.

Usage (run.py starts it, one subprocess per file):  python _driver.py TEST_FILE RESULTS_JSONL

Each line of RESULTS_JSONL is {"test": id, "outcome": passed|failed|error|skipped, "cause": ...}
written as soon as the test ends, so a file killed by its timeout keeps what it had finished. An
exception outside any test (an import that fails, a crash in set-up at module level) is one
"error" line with test "<module>".
"""
import json
import os
import runpy
import sys
import traceback
import unittest
import unittest.runner

test_file, results_path = os.path.abspath(sys.argv[1]), sys.argv[2]
results = open(results_path, "a", buffering=1)


def cause_of(err) -> str:
    """A one-line cause: the exception's type and the first line of its message."""
    exc_type, exc, _ = err
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{exc_type.__name__}: {first}"[:300]


def where_of(err) -> str:
    """The innermost frame of the test file (file:line function), to tell causes apart."""
    frames = traceback.extract_tb(err[2])
    mine = [f for f in frames if os.path.abspath(f.filename) == test_file]
    f = mine[-1] if mine else (frames[-1] if frames else None)
    return f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" if f else ""


def record(test, outcome, err=None, reason=None):
    row = {"test": test.id() if hasattr(test, "id") else str(test), "outcome": outcome}
    if err is not None:
        row["cause"] = cause_of(err)
        row["where"] = where_of(err)
    if reason is not None:
        row["cause"] = str(reason)[:300]
    results.write(json.dumps(row) + "\n")


class RecordingResult(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        record(test, "failed", err)

    def addError(self, test, err):
        super().addError(test, err)
        record(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        record(test, "skipped", reason=reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        record(test, "failed", reason="unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            record(subtest, "failed" if failed else "error", err)


class RecordingRunner(unittest.runner.TextTestRunner):
    resultclass = RecordingResult


unittest.runner.TextTestRunner = RecordingRunner
unittest.TextTestRunner = RecordingRunner

sys.argv = [test_file]
sys.path.insert(0, os.path.dirname(test_file))
os.chdir(os.path.dirname(test_file))
try:
    runpy.run_path(test_file, run_name="__main__")
except SystemExit:
    pass
except BaseException:  # noqa: BLE001 - any escape is reported as the file's error
    err = sys.exc_info()
    results.write(json.dumps({"test": "<module>", "outcome": "error", "cause": cause_of(err),
                              "where": where_of(err)}) + "\n")
results.close()
