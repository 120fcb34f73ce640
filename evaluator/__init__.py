"""qashift evaluator: run frozen extractive-QA submissions on test sets and score them."""

__version__ = "0.1.0"
