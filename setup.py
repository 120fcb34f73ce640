"""Packaging: setup.cfg says what the package is; this file adds the checkout's folders to
the wheel, so that an installed qashift has its test sets, bundle definitions, study plans
and committed tables without a checkout (the frozen systems' weights stay in the
repository: `frozen/` is 300 MB)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

FOLDERS = ("testsets", "submissions", "configs", "studies", "results")


class WithFolders(build_py):
    """build_py, then the folders copied into evaluator/checkout/ of the build (not for an
    editable install, which reads the checkout itself)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "evaluator" / "checkout"
        shutil.rmtree(target, ignore_errors=True)  # an earlier build's copy: none of it stays
        for name in FOLDERS:
            if Path(name).is_dir():
                shutil.copytree(name, target / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": WithFolders})
