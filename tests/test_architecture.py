"""The layout is a contract: stage subpackages, no cycles between them, lazy imports only
where they are named, and the import-linter contracts that CI also runs."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("evaluator", "analysis")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _unit(module: str) -> str:
    """The stage a module belongs to: evaluator.<stage>, or analysis."""
    parts = module.split(".")
    return "analysis" if parts[0] == "analysis" else ".".join(parts[:2])


def _imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import of the project, at any
    depth of the file: imports inside functions count like the others."""
    tree = ast.parse(path.read_text())
    inner: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.update(id(n) for n in ast.walk(fn))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES:
                found.append((name, node.lineno, id(node) in inner))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for target, _, _ in _imports(path, module):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]  # `from pkg import name` of a non-module
            if target in modules and _unit(target) != _unit(module) and \
                    _unit(module) not in ("evaluator", "evaluator.__main__"):
                edges[_unit(module)].add(_unit(target))
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_stages_counting_imports_inside_functions():
    edges = _graph()
    assert edges, "the import graph is empty: the walk found nothing"
    assert _cycle(edges) is None, f"import cycle: {' -> '.join(_cycle(edges))}"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_the_qa_program_imports_nothing_else_of_the_project():
    for module, path in _modules().items():
        if _unit(module) == "evaluator.qa":
            outside = [t for t, _, _ in _imports(path, module) if _unit(t) != "evaluator.qa"]
            assert not outside, f"{module} imports {outside}"


def test_every_import_inside_a_function_says_why_it_is_lazy():
    unexplained = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        text = " ".join(lines[node.lineno - 1:node.end_lineno])
                        if "# lazy:" not in text:
                            unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not unexplained, f"imports inside functions without a '# lazy:' reason: {unexplained}"


def test_the_evaluator_holds_stage_subpackages_and_no_loose_modules():
    loose = sorted(p.name for p in (ROOT / "evaluator").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"]
    stages = {p.name for p in (ROOT / "evaluator").iterdir() if (p / "__init__.py").is_file()}
    assert {"core", "data", "bundles", "jobs", "qa", "runners", "scoring", "stats", "store",
            "pipeline", "training", "cli"} <= stages


def test_the_tests_mirror_the_tree():
    stages = {p.name for p in (ROOT / "evaluator").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()
               and p.name != "__pycache__"}
    assert folders <= stages | {"analysis", "e2e", "hostile", "support"}, folders - stages


def test_the_import_contracts_hold():
    proc = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "0 broken" in proc.stdout


STAGE_NAMES = {"evaluator": {p.name for p in (ROOT / "evaluator").iterdir()
                             if (p / "__init__.py").is_file()},
               "analysis": {p.name for p in (ROOT / "analysis").iterdir()
                            if (p / "__init__.py").is_file()}}
DOTTED = re.compile(r"`([a-z_]+(?:\.[A-Za-z_]\w*)+)`")


def _names_something(dotted: str) -> bool | None:
    """Whether a dotted name a docstring gives (`pipeline.matrix.run`, `analysis.sources`)
    is a module of the project or an attribute of one; None where it does not start with a
    package or stage of the project (a method of a variable, a file name)."""
    parts = dotted.split(".")
    roots = [parts] if parts[0] in STAGE_NAMES else \
        [[package, *parts] for package, stages in STAGE_NAMES.items() if parts[0] in stages]
    if not roots:
        return None
    for candidate in roots:
        for cut in range(len(candidate), 1, -1):
            try:
                found = importlib.import_module(".".join(candidate[:cut]))
            except ImportError:
                continue
            for attribute in candidate[cut:]:
                found = getattr(found, attribute, None)
            if found is not None:
                return True
            break
    return False


def test_every_module_says_what_it_is_and_names_only_what_exists():
    """The docstring check: every module has a docstring, and every dotted name a docstring
    gives in backticks that starts with a package or stage of the project names a module or
    an attribute that exists (a renamed or removed one leaves no stale pointer)."""
    missing, stale = [], []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text())
        if path.read_text().strip() and not ast.get_docstring(tree):
            missing.append(module)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                for name in DOTTED.findall(ast.get_docstring(node) or ""):
                    if _names_something(name) is False:
                        stale.append(f"{module}: {name}")
    assert not missing, missing
    assert not stale, stale


def test_the_docstring_check_finds_a_stale_name():
    assert _names_something("pipeline.matrix.run") is True
    assert _names_something("analysis.sources") is True
    assert _names_something("pipeline.matrix.no_such_function") is False
    assert _names_something("training.evaluation") is False  # moved to api.evaluation
    assert _names_something("json.dumps") is None  # not a name of the project
