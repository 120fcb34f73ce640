"""Errors a user can act on, and the failure classes a run can end in.

`UserError` carries a one-line message that the CLI prints without a traceback. A run's
failure is recorded with one of `FAILURE_CLASSES`, so a matrix can be summarised by cause.
"""

from __future__ import annotations

FAILURE_CLASSES = {
    "image-missing": "the image could not be found or pulled",
    "build-failed": "building the submission's environment failed",
    "out-of-memory": "the submission exceeded its memory limit",
    "timeout": "the submission ran past its time limit",
    "nonzero-exit": "the submission exited with a non-zero status",
    "no-predictions": "the submission wrote no predictions file",
    "no-weights": "a training run finished without writing the weights of its system",
    "refused-files": "a file or folder the submission handed in was refused (a link, a special, "
                     "sparse or oversized file, unreadable or too deeply nested JSON)",
    "malformed-predictions": "the predictions file is not a JSON object of id -> answer text",
    "output-too-large": "the submission wrote more to its output folder than its limit",
    "no-gpu-kernel": "the framework has no CUDA kernel for this GPU (retry with --device cpu)",
    "no-gpu": "a GPU was requested but none is there: the container engine or the host "
              "offers none (retry with --device cpu)",
    "data-unavailable": "the test set's data could not be obtained or verified",
    "cancelled": "the scheduler cancelled the job or its node failed",
    "runner-error": "the runner could not start the cell (e.g. the scheduler rejected it)",
    "not-applicable": "the bundle cannot run on this test set",
    "endpoint-unreachable": "the generative bundle's server could not be reached (refused "
                            "connections or time-outs, after retries)",
    "endpoint-error": "the generative bundle's server kept failing (429 or 5xx after retries) "
                      "or answered with something that is not a completion",
    "endpoint-refused": "the generative bundle's server refused the request (an unknown model, "
                        "a bad request or key)",
    "internal-error": "the evaluator itself failed on this cell (traceback in the log)",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every path that stops cleanly on Ctrl-C (cancel the
    matrix's queued cells, release leases, remove working folders) stops on it too."""


class UserError(Exception):
    """A problem the user can fix; the message is one line saying what failed and how to fix it."""


class DataError(UserError):
    """A data file could not be obtained or verified (offline, wrong hash, wrong count)."""


class ConfigError(UserError):
    """A testset.yaml or bundle.yaml is invalid."""


class UnknownNameError(UserError):
    """A bundle or test set name that is not registered."""


class RunFailure(UserError):
    """A submission's run failed; `failure_class` is one of FAILURE_CLASSES."""

    def __init__(self, failure_class: str, message: str, log: str = ""):
        if failure_class not in FAILURE_CLASSES:
            raise ValueError(f"unknown failure class {failure_class!r}")
        super().__init__(message)
        self.failure_class = failure_class
        self.log = log


def failure_class_of(error: UserError) -> str:
    """The failure class a cell records for `error`: a run's own class, unreadable data, or
    the runner that could not start it (e.g. a scheduler that rejected the job)."""
    if isinstance(error, RunFailure):
        return error.failure_class
    return "data-unavailable" if isinstance(error, DataError) else "runner-error"
