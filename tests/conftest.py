"""Shared fixtures: the local data mirror (../shared/data) and an isolated workspace per test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The suite's workers share the host's cores, and what each starts (torch, spaCy, ONNX Runtime,
# the runs of the local and hf-qa runners, which pass these on) would start a numeric thread
# per core, spinning while it waits: two such processes side by side run several times slower
# than with one thread each (benchmarks/thread_oversubscription.py). One thread each, and
# OpenMP's waiting threads asleep rather than spinning: a program that asks torch for a thread
# per core itself (the approaches' predict commands do) then wastes no CPU waiting either (the
# training tests on two workers: 179 s -> 129 s). Set before anything loads those libraries
# (the runners' module of limits loads none); a variable already set is left as it is.
from evaluator.runners.limits import THREAD_COUNTS  # noqa: E402

for _name in THREAD_COUNTS:
    os.environ.setdefault(_name, "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Python keeps compiled byte code for the suite and the processes it starts (pytest its
# assertion-rewritten test modules too): a machine's PYTHONDONTWRITEBYTECODE would have every
# one of them compile the package and the tests again (a command starts in 0.48 s instead of
# 0.28, and each test worker spends seconds rewriting the tests before the first one runs).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# The commands the tests start (`qashift`, `evaluate`, a bundle's `python3`) are this
# interpreter's, found first on PATH rather than through a version manager's shims (pyenv's
# cost a tenth of a second per process, and the suite starts thousands).
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])

pytest_plugins = ["tests.docker_kit",  # the Docker fixtures (client, toy, ...)
                  "tests.support.training",  # registry: a small training registry
                  "tests.support.approaches",  # words: an approach trained in seconds
                  "tests.support.generative",  # tiny_lm, served: a generative model, a server
                  "tests.support.strict_skips"]  # under CI (QASHIFT_CI=1) a skip fails

# A test that starts a container, a cluster job, a server or a browser, or trains a model, is
# slow whether or not it says so: `pytest -m "not slow"` (README's fast tier) leaves it out.
SLOW_FIXTURES = frozenset({"client", "cluster", "browser", "served", "tiny_lm", "registry",
                           "words", "approach_registry", "trained_elsewhere",
                           "frozen_plan_made"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # slow tests first (in their own order): parallel workers then end on short tests
    # together, instead of one waiting on the other's long test at the end
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# The suite runs on parallel workers (pytest-xdist, `-n auto` in setup.cfg), at most
# MAX_WORKERS of them. Tests that submit Slurm jobs share one group, so they run one at a time
# on one worker: they wait on the cluster's few CPUs and would time out queued behind another's.
MAX_WORKERS = 4
SLURM = pytest.mark.xdist_group("slurm")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


REPO = Path(__file__).resolve().parents[1]
SLIDING_WINDOW = REPO / "submissions" / "sliding-window"  # the reference baseline bundle
SHARED_DATA = Path(os.environ.get("QASHIFT_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only mirror of the public data sets; tests that need it skip loudly without it."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data mirror not found at {SHARED_DATA}; set QASHIFT_DATA_DIR")
    return SHARED_DATA


def use_workspace(patch: pytest.MonkeyPatch, home: Path, shared_data: Path) -> Path:
    """The environment pointed at home/workspace (store, objects), home/cache and the mirror;
    the workspace."""
    patch.setenv("QASHIFT_WORKSPACE", str(home / "workspace"))
    patch.setenv("QASHIFT_CACHE", str(home / "cache"))
    patch.setenv("QASHIFT_DATA_DIR", str(shared_data))
    return home / "workspace"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> Path:
    """A fresh workspace (store, objects) and cache for one test, with the mirror configured."""
    return use_workspace(monkeypatch, tmp_path, shared_data)


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this run that all its test workers share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def run_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache of a test that sets none (`workspace` gives each test its own): one for the
    run, as a fresh machine has, so that no test reads or fills the user's
    ~/.cache/qashift (a virtual environment or a figure kept there by an earlier run)."""
    folder = run_folder(tmp_path_factory) / "cache"
    os.environ["QASHIFT_CACHE"] = str(folder)
    return folder


SPACY_PARSES = ("annotations", "cloze-parses")  # the cache's folders of `data.nlp.cached`


@pytest.fixture(scope="session")
def spacy_parses(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of spaCy's parses for this run, shared by its test workers: a parent's tags
    and a cloze source's sentences are computed by whichever test needs them first (two at
    once both compute them; the cache keys them by their input and spaCy's versions, so
    the others read what they would have computed). Never shared between runs."""
    return run_folder(tmp_path_factory) / "spacy-parses"


def share_parses(cache: Path, parses: Path) -> None:
    """The spaCy parse folders of the cache `cache` linked to the run's `spacy_parses`."""
    cache.mkdir(parents=True, exist_ok=True)
    for kind in SPACY_PARSES:
        (parses / kind).mkdir(parents=True, exist_ok=True)
        if not (cache / kind).exists():
            (cache / kind).symlink_to(parses / kind, target_is_directory=True)


def hears_ctrl_c() -> None:
    """For a child that a test interrupts: restore SIGINT, which a shell ignores for the
    background jobs it starts (and so for a test suite run as one, and its children)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def write_testset(root: Path, set_id: str, raw: dict, *, scorer: str = "squad-v1.1",
                  questions: int | None = None, reference: str = "squad-dev") -> Path:
    """A plain test-set folder (data file inside the folder), as a user would add one."""
    import json

    folder = root / set_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.json").write_text(json.dumps(raw))
    count = sum(len(p["qas"]) for a in raw["data"] for p in a["paragraphs"])
    (folder / "testset.yaml").write_text(
        f"id: {set_id}\nname: {set_id}\nversion: '1'\nkind: derived\nreference: {reference}\n"
        f"questions: {questions or count}\nscorer: {scorer}\ncluster: paragraph\n"
        f"license: CC BY-SA 4.0\ncitation: test fixture\nfile: data.json\n")
    return folder


def write_derived(root: Path, set_id: str, parent: str, *, questions: int = 10,
                  reference: str = "squad-dev", transform: str = "empty-question") -> Path:
    """A derived test-set folder: `transform` applied to `parent` when it is first used."""
    folder = root / set_id
    folder.mkdir(parents=True)
    (folder / "testset.yaml").write_text(
        f"id: {set_id}\nname: {set_id}\nversion: '1'\nkind: derived\nreference: {reference}\n"
        f"questions: {questions}\nscorer: squad-v1.1\ncluster: paragraph\n"
        f"license: CC BY-SA 4.0\ncitation: test fixture\n"
        f"derive: {{from: {parent}, transform: {transform}}}\n")
    return folder


def outdate_strata_rows(table: Path, prefix: str) -> None:
    """Mark the rows of a stratum table that start with `prefix` as made by other features
    (an older `analysis.sources.strata` VERSION)."""
    lines = table.read_text().splitlines()
    table.write_text("\n".join([lines[0], *(line.replace(",v", ",v0-older-")
                                             if line.startswith(prefix) else line
                                             for line in lines[1:])]) + "\n")


def write_command_bundle(root: Path, bundle_id: str, program: str, *, timeout: int = 60) -> Path:
    """A command bundle whose program is the given Python source."""
    folder = root / bundle_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "program.py").write_text(program)
    (folder / "bundle.yaml").write_text(
        f"id: {bundle_id}\nname: {bundle_id}\nkind: command\n"
        f"command: python3 program.py {{input}} {{output}}\n"
        f"resources: {{timeout: {timeout}}}\n")
    return folder


FIRST_WORD = """import json, sys
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: p["context"].split()[0] for a in doc["data"] for p in a["paragraphs"]
           for q in p["qas"]}, open(sys.argv[2], "w"))
"""  # a command bundle's program: every question answered by its paragraph's first word

BUSY_THEN_IDLE = """import time
start = time.process_time()
while time.process_time() - start < 1:
    pass
time.sleep(1)
""" + FIRST_WORD  # a second of CPU, a second idle, then FIRST_WORD's answers


def tiny_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, testsets: dict[str, dict],
                  bundles: dict[str, str | Path]) -> tuple[Path, Path]:
    """Test-set and submission roots under tmp_path holding these folders, with the
    environment pointing at them: (sets, subs). A bundle is a program (written as a command
    bundle) or a folder (copied, e.g. one of submissions/)."""
    import shutil

    sets, subs = tmp_path / "sets", tmp_path / "subs"
    sets.mkdir(exist_ok=True)
    subs.mkdir(exist_ok=True)
    for set_id, raw in testsets.items():
        write_testset(sets, set_id, raw)
    for bundle_id, source in bundles.items():
        if isinstance(source, Path):
            shutil.copytree(source, subs / bundle_id)
        else:
            write_command_bundle(subs, bundle_id, source)
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    return sets, subs


@pytest.fixture(scope="session")
def dev_raw(shared_data: Path) -> dict:
    import json

    return json.loads((shared_data / "squad-v1.1" / "dev-v1.1.json").read_text())


@pytest.fixture
def small_dev(dev_raw: dict) -> dict:
    """The first two articles of SQuAD dev: a real, small test set."""
    return {"version": "1.1", "data": dev_raw["data"][:2]}


def few_of(dev_raw: dict, paragraphs: int = 3) -> dict:
    """The first `paragraphs` paragraphs of each of the first two articles of a SQuAD-format
    set (of SQuAD dev, 95 questions for three): for a test that runs a model, where the set's
    size proves nothing more."""
    return {"version": "1.1", "data": [dict(a, paragraphs=a["paragraphs"][:paragraphs])
                                       for a in dev_raw["data"][:2]]}


@pytest.fixture
def few_dev(dev_raw: dict) -> dict:
    """`few_of` SQuAD dev."""
    return few_of(dev_raw)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, dev_raw) -> Path:
    """A tiny random BERT QA checkpoint (tests/tiny_bert.py), built once per session."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.tiny_bert import make_tiny_bert, squad_texts

    folder = make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"),
                            squad_texts({"data": dev_raw["data"][:2]}))
    # bundles name it by absolute path: declare its folder a model store (an operator setting)
    add_model_store(folder.parent)
    return folder


@pytest.fixture(scope="session")
def tiny_export(tiny_model, dev_raw):
    """The tiny checkpoint's ONNX export (fp32 and int8, checked on 60 questions), made once
    per session: a test that runs the checkpoint with `onnx: true` asks for it."""
    from evaluator.runners.onnx_export import export
    from tests.tiny_bert import subset

    return export(tiny_model, int8=True, sample=subset(dev_raw, slice(0, 1)), sample_size=60)


def add_model_store(folder: Path) -> None:
    """Declare one more model store for this test session (QASHIFT_MODEL_STORE is a list:
    a session fixture adds its folder, never replaces another's)."""
    stores = [s for s in os.environ.get("QASHIFT_MODEL_STORE", "").split(os.pathsep) if s]
    if str(folder) not in stores:
        os.environ["QASHIFT_MODEL_STORE"] = os.pathsep.join([*stores, str(folder)])


def raced_store(workspace: Path, method: str, other_controller):
    """A store whose first look (`get` for a cell, `get_system` for a system) misses, and
    right after which another controller, on its own connection, finishes that work: the
    window in which two controllers could both decide to do it."""
    from evaluator.store.store import Store

    looks = []

    def look(self, key):
        looks.append(key)
        if len(looks) == 1:
            other_controller()
            return None
        return getattr(Store, method)(self, key)

    return type("RacedStore", (Store,), {method: look})(workspace)
