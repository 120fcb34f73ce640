"""One rule for how a run ended, the same under every runner: out of memory means the engine
said so, a SIGKILL with no time-out near the memory limit (or with no limit to compare, the
kernel's OOM killer), or the program's own last words; then a missing GPU kernel, then any
other non-zero status."""

from __future__ import annotations

import pytest

from evaluator.core.errors import RunFailure
from evaluator.runners.base import NO_GPU_KERNEL, Exit, classify

GIB = 1 << 30


@pytest.mark.parametrize("ended, failure_class", [
    (Exit(0, "fine"), None),
    (Exit(0, "", produced=False), None),  # no predictions: the scorer's no-predictions
    (Exit(137, "", killed_for_memory=True, memory_limit=GIB), "out-of-memory"),
    (Exit(137, "", peak_memory=GIB, memory_limit=GIB), "out-of-memory"),
    (Exit(137, "", peak_memory=GIB // 10, memory_limit=GIB), "nonzero-exit"),  # killed by hand
    (Exit(-9, "", peak_memory=GIB // 10), "out-of-memory"),  # local: the kernel's OOM killer
    (Exit(1, "Traceback ...\nMemoryError"), "out-of-memory"),
    (Exit(1, "torch.OutOfMemoryError: CUDA out of memory."), "out-of-memory"),
    (Exit(-9, "", timed_out=True, timeout_s=5), "timeout"),
    (Exit(0, "", output_exceeded=True, output_limit=GIB), "output-too-large"),
    (Exit(1, f"RuntimeError: CUDA error: {NO_GPU_KERNEL}"), "no-gpu-kernel"),
    (Exit(0, NO_GPU_KERNEL, produced=False), "no-gpu-kernel"),
    (Exit(2, "usage: program.py"), "nonzero-exit"),
])
def test_every_runner_classifies_an_ending_by_one_rule(ended, failure_class):
    if failure_class is None:
        classify("sys", ended)
        return
    with pytest.raises(RunFailure) as caught:
        classify("sys", ended)
    assert caught.value.failure_class == failure_class and "\n" not in str(caught.value)
