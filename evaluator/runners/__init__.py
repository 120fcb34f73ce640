"""Runners turn (bundle, answer-free input) into a predictions file and a run record.

The interface is one method, `run(request) -> RunRecord`, raising `RunFailure` with a failure
class when the submission fails. Runners never see gold answers and never touch the store.
Which runner serves which bundle kind on which backend is decided in `dispatch` only.
"""
