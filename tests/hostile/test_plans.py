"""Files of the operator's that name work to do (derived test-set folders, study plans) are
bounded: a derive cycle, a very long derive chain and a plan of millions of systems are
one-line errors naming the file, before anything is generated or expanded."""

from __future__ import annotations

import time

import pytest

from evaluator import study
from evaluator.core.errors import UserError
from evaluator.data import testsets
from tests.conftest import write_derived, write_testset


@pytest.fixture
def sets(tmp_path, monkeypatch, small_dev, workspace):
    root = tmp_path / "sets"
    write_testset(root, "base", small_dev)
    monkeypatch.setenv("QASHIFT_TESTSETS", str(root))
    return root


def test_a_derive_cycle_is_one_line_naming_the_loop(sets):
    write_derived(sets, "a", "b")
    write_derived(sets, "b", "a")
    with pytest.raises(UserError, match=r"a/testset.yaml: derive.from loops: a -> b -> a") as e:
        testsets.get("a").load()
    assert "\n" not in str(e.value)


def test_a_derive_chain_deeper_than_the_bound_is_one_line(sets):
    write_derived(sets, "d0", "base")
    for k in range(1, 40):
        write_derived(sets, f"d{k}", f"d{k - 1}")
    with pytest.raises(UserError, match=r"d39/testset.yaml: derive chain deeper than 16"):
        testsets.get("d39").load()


def test_a_plan_of_millions_of_systems_is_refused_at_once(sets, tmp_path):
    split = write_testset(sets, "split", {"version": "1.1", "data": []}, questions=1)
    (split / "testset.yaml").write_text((split / "testset.yaml").read_text().replace(
        "kind: derived", "kind: training"))
    plan = tmp_path / "plan.yaml"
    seeds = ", ".join(str(k) for k in range(2000))
    plan.write_text(f"id: big\nname: big\nsplit: split\ntestsets: [base]\napproaches:\n"
                    f"  logreg-rajpurkar:\n    settings: [{{}}, {{l2: 0.001}}]\n"
                    f"    seeds: [{seeds}]\n    sizes: [null, 10, 20]\n")
    started = time.monotonic()
    with pytest.raises(UserError, match=r"plan.yaml: logreg-rajpurkar: the plan asks for "
                                        r"12,000 systems or more, over the 5,000"):
        study.load(plan)
    assert time.monotonic() - started < 10
    plan.write_text("id: big\nname: big\nsplit: split\ntestsets: [base]\napproaches:\n"
                    "  logreg-rajpurkar: {draws: 100000000}\n")
    with pytest.raises(UserError, match=r"over the 5,000 a plan may hold"):
        study.load(plan)


@pytest.mark.parametrize("params, why", [
    ("{questions: 100000000000}", r"derive.params.questions is 100,000,000,000, beyond"),
    ("{ratio: .inf}", r"derive.params.ratio must be a finite number"),
    ("{sizes: [1, 2, 9999999999]}", r"derive.params.sizes is 9,999,999,999, beyond"),
])
def test_generator_parameters_beyond_any_generator_are_one_line(sets, params, why):
    folder = sets / "huge"
    folder.mkdir()
    (folder / "testset.yaml").write_text(
        "id: huge\nname: huge\nversion: '1'\nkind: synthetic\nquestions: 10\n"
        "scorer: squad-v1.1\ncluster: paragraph\nlicense: CC0\ncitation: test\n"
        f"derive: {{transform: babi, params: {params}}}\n")
    with pytest.raises(UserError, match=why):
        testsets.from_folder(folder)
