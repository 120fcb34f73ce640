"""A bare install works: the package without extras, in a fresh virtual environment with no
system site packages and outside any checkout, answers `evaluate --help`, lists the test
sets and bundles it carries and runs the README's main job (a stored leaderboard submission
scored on SQuAD dev, which needs no model framework)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_package_without_extras_installs_into_a_bare_venv_and_runs_the_main_job(
        tmp_path, shared_data):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    python = env_dir / "bin" / "python"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL"))}
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", str(REPO)],
                             capture_output=True, text=True, env=environ, timeout=1500)
    assert install.returncode == 0, install.stderr[-3000:]
    evaluate = env_dir / "bin" / "evaluate"
    helped = subprocess.run([evaluate, "--help"], capture_output=True, text=True, env=environ,
                            timeout=120, cwd=tmp_path)
    assert helped.returncode == 0 and "--bundle" in helped.stdout, helped.stderr
    outside = {**environ, "QASHIFT_CACHE": str(tmp_path / "cache")}  # and no QASHIFT_ROOT:
    # the wheel carries the test-set folders and the bundle definitions
    outside.pop("QASHIFT_ROOT", None)
    job = subprocess.run([evaluate, "--bundle", "bert-ensemble", "--testset", "squad-dev",
                          "--data-dir", str(shared_data), "--json",
                          "--workspace", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=outside)
    assert job.returncode == 0, job.stderr[-3000:]
    [cell] = json.loads(job.stdout)["results"]
    assert (cell["n"], round(cell["em"]["value"], 3), round(cell["f1"]["value"], 3)) == \
        (10570, 86.206, 92.196)  # the published figures of this leaderboard entry
    assert sys.executable != str(python)
    qashift = env_dir / "bin" / "qashift"
    for args, shown in ((["testsets", "list"], "reddit-test"), (["bundles", "list"],
                                                              "sliding-window")):
        listed = subprocess.run([qashift, *args], capture_output=True, text=True,
                                timeout=300, cwd=tmp_path, env=outside)
        assert listed.returncode == 0 and shown in listed.stdout, listed.stderr[-2000:]
