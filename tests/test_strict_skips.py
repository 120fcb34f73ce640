"""Under CI (QASHIFT_CI=1, which .ci/run exports) a skipped test fails; elsewhere it skips."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_skip_fails_under_ci_and_only_there(tmp_path):
    (tmp_path / "test_needs.py").write_text(
        "import pytest\n\n"
        "def test_needs_a_daemon():\n    pytest.skip('no Docker daemon answers')\n\n"
        "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
            "tests.support.strict_skips", "-n", "0", str(tmp_path / "test_needs.py")]
    env = {k: v for k, v in os.environ.items() if k != "QASHIFT_CI"}
    laptop = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env,
                            timeout=300)
    assert laptop.returncode == 0 and "1 skipped, 1 xfailed" in laptop.stdout, laptop.stdout
    ci = subprocess.run(args, capture_output=True, text=True, cwd=REPO,
                        env={**env, "QASHIFT_CI": "1"}, timeout=300)
    assert ci.returncode == 1 and "1 failed, 1 xfailed" in ci.stdout, ci.stdout
    assert "skipped under CI (QASHIFT_CI=1), where nothing may be" in ci.stdout
    assert "no Docker daemon answers" in ci.stdout
