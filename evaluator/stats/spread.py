"""How much one system's score moves across prompt templates (HELM reports this spread): a
robustness claim that moves with the template is not a robustness claim."""

from __future__ import annotations

import math
from collections.abc import Sequence


def spread(scores: Sequence[float]) -> dict:
    """n, mean, sample standard deviation (0 for one score), min, max and range."""
    n = len(scores)
    if n == 0:
        raise ValueError("no scores to spread")
    mean = sum(scores) / n
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "mean": mean, "sd": sd, "min": min(scores), "max": max(scores),
            "range": max(scores) - min(scores)}
