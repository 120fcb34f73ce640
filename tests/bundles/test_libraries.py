"""Shared code: a bundle's `libraries: [NAME]` is the package `_libraries/NAME/` beside the
bundle folders, importable by the bundle's program under every runner, read-only, and part of
the bundle's digest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator.bundles import spec as bundles
from evaluator.core.errors import ConfigError
from evaluator.core.gate import folder_digest
from evaluator.data.testsets import input_document
from evaluator.runners.base import RunRequest
from evaluator.runners.docker import daemon_available
from evaluator.runners.local import LocalRunner
from tests.docker_kit import run_direct

PROGRAM = """\
import json, sys
import firstword
doc = json.load(open(sys.argv[1]))
answers = {qa["id"]: firstword.answer(p["context"])
           for a in doc["data"] for p in a["paragraphs"] for qa in p["qas"]}
try:  # the library is the bundle's to read, never to change
    open(firstword.__file__, "a").write("# changed")
    answers["wrote-library"] = "yes"
except OSError:
    pass
json.dump(answers, open(sys.argv[2], "w"))
"""


def make(root: Path, library_code: str = "def answer(text):\n    return text.split()[0]\n",
         libraries: str = "[firstword]", kind: str = "command") -> Path:
    library = root / "_libraries" / "firstword"
    library.mkdir(parents=True, exist_ok=True)
    (library / "__init__.py").write_text(library_code)
    folder = root / "uses-lib"
    folder.mkdir(exist_ok=True)
    (folder / "program.py").write_text(PROGRAM)
    (folder / "bundle.yaml").write_text(
        f"id: uses-lib\nname: uses-lib\nkind: {kind}\nlibraries: {libraries}\n"
        f"command: python3 program.py {{input}} {{output}}\nresources: {{timeout: 60}}\n")
    return folder


def expected(raw: dict) -> dict:
    return {qa["id"]: p["context"].split()[0]
            for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]}


def test_the_local_runner_puts_a_private_copy_of_the_library_on_the_path(tmp_path, small_dev):
    folder = make(tmp_path / "subs")
    before = (folder.parent / "_libraries" / "firstword" / "__init__.py").read_text()
    inp, out = tmp_path / "input.json", tmp_path / "out"
    inp.write_text(json.dumps(input_document(small_dev)))
    out.mkdir()
    bundle = bundles.from_folder(folder)
    LocalRunner().run(RunRequest(bundle, inp, out, "toy", "cpu"))
    answers = json.loads((out / "predictions.json").read_text())
    answers.pop("wrote-library", None)  # the private copy may be written; the original not
    assert answers == expected(small_dev)
    assert (folder.parent / "_libraries" / "firstword" / "__init__.py").read_text() == before


@pytest.mark.skipif(not daemon_available(), reason="no Docker daemon answers")
@pytest.mark.usefixtures("no_container_left_behind")
def test_the_docker_runner_mounts_the_library_read_only_on_the_path(tmp_path, small_dev):
    folder = make(tmp_path / "subs")
    record, out = run_direct(folder, tmp_path, small_dev)
    assert record.exit_code == 0
    assert json.loads((out / "predictions.json").read_text()) == expected(small_dev)


def test_the_library_is_part_of_the_digest(tmp_path):
    folder = make(tmp_path / "subs")
    first = bundles.from_folder(folder).digest
    assert first != folder_digest(folder)
    make(tmp_path / "subs", library_code="def answer(text):\n    return text.split()[-1]\n")
    assert bundles.from_folder(folder).digest != first


def test_a_bundle_without_libraries_keeps_its_plain_folder_digest(tmp_path):
    folder = make(tmp_path / "subs", libraries="[]")
    assert bundles.from_folder(folder).digest == folder_digest(folder)


@pytest.mark.parametrize(("libraries", "kind", "message"), [
    ("[nothere]", "command", "library 'nothere' not found"),
    ("['../firstword']", "command", "is not a Python package name"),
    ("[firstword, firstword]", "command", "named twice"),
    ("[firstword]", "hf-qa", "libraries: is for command bundles and approaches"),
])
def test_a_bad_library_entry_is_one_line(tmp_path, libraries, kind, message):
    folder = make(tmp_path / "subs", libraries=libraries, kind=kind)
    with pytest.raises(ConfigError, match=message) as error:
        bundles.from_folder(folder)
    assert "\n" not in str(error.value)


def test_a_library_with_a_link_leaving_it_is_refused(tmp_path):
    folder = make(tmp_path / "subs")
    (tmp_path / "secret.json").write_text("{}")
    (folder.parent / "_libraries" / "firstword" / "gold.json").symlink_to(tmp_path / "secret.json")
    with pytest.raises(ConfigError, match="leaves the bundle folder"):
        bundles.from_folder(folder)
