"""qashift evaluator: run frozen extractive-QA submissions on test sets and score them.

`evaluate`, `EvaluationConfig` and `results` (the Python API, the `evaluator.api` package)
load on first use, so `qashift --help` does not pay for pandas."""

import importlib

__version__ = "0.1.0"
API = {name: "evaluator.api" for name in ("evaluate", "EvaluationConfig", "results")}


def __getattr__(name: str):
    if name in API:
        return getattr(importlib.import_module(API[name]), name)
    raise AttributeError(f"module 'evaluator' has no attribute {name!r}")
