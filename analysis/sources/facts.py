"""What the analysis knows about test sets, read from their folders (`testset.yaml`: size,
display label, kind, reference), never restated. The one set the analysis meets without a
folder, the SQuAD v1.1 hidden test set of the published results, has its facts here."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from evaluator.core import settings
from evaluator.data import testsets

# SQuAD v1.1 hidden test: 9,533 questions (Rajpurkar et al. 2016, dataset statistics; every
# exact_match in the leaderboard export out-v1.1.json times 9533/100 is an integer to 1e-12,
# which no neighbouring n satisfies: tests/test_analysis_tidy.py checks it).
SQUAD_TEST = {"id": "squad-test", "questions": 9533, "label": "SQuAD v1.1 test"}


def _folders() -> dict:
    return _scan(settings.testsets_dir())


@cache
def _scan(root: Path) -> dict:
    """The valid folders under one test-set root, read once per root (a test, or a user's
    --data-dir, may point the registry elsewhere mid-process)."""
    good, _ = testsets.scan(root)  # a broken folder is someone else's problem here
    return good


def known() -> set[str]:
    """Every test-set id the analysis can label: the folders, plus the SQuAD v1.1 test."""
    return {SQUAD_TEST["id"], *_folders()}


def size(testset: str) -> int | None:
    """Questions in a test set (None when no folder names it)."""
    if testset == SQUAD_TEST["id"]:
        return SQUAD_TEST["questions"]
    found = _folders().get(testset)
    return found.questions if found else None


def label(testset: str) -> str:
    """The short name figures and tables print: the folder's `label` (else its name)."""
    if testset == SQUAD_TEST["id"]:
        return SQUAD_TEST["label"]
    found = _folders().get(testset)
    return (found.label or found.name) if found else testset


KINDS = {"original": "Original", "replication": "Replication", "natural-shift": "Natural shift",
         "adversarial": "Adversarial", "derived": "Derived", "synthetic": "Synthetic"}


def kind(testset: str) -> str:
    """The folder's kind (original, replication, natural-shift, adversarial, derived, ...);
    "other" for a set no folder names."""
    if testset == SQUAD_TEST["id"]:
        return "original"
    found = _folders().get(testset)
    return found.kind if found else "other"


def references() -> dict[str, str]:
    """{test set: the set it is compared against}, for every folder that names one."""
    return {name: ts.reference for name, ts in _folders().items() if ts.reference}


def replication_of(testsets_present: set[str]) -> str | None:
    """The replication set (kind replication) among the given test sets, preferring the one
    compared against the original dev set: the denominator of the adaptivity gap."""
    found = sorted((ts.reference != "squad-dev", name) for name, ts in _folders().items()
                   if ts.kind == "replication" and name in testsets_present)
    return found[0][1] if found else None


def is_ablation(testset: str) -> bool:
    """Whether a folder derives the set from its parent by one of the input ablations
    (`evaluator/data/derive/ablations.py`, Sugawara et al.): what the ablation tables list,
    and nothing else that merely has a reference (a natural shift, a sample)."""
    from evaluator.data import derive  # lazy: imports every transform; asked rarely

    found = _folders().get(testset)
    if found is None or found.derive is None:
        return False
    transform = derive.transforms().get(found.derive.transform)
    return transform is not None and transform.fn.__module__.endswith(".derive.ablations")
