"""Every import written inside a function names a module (and names) that exist.

Imports inside functions (kept there to break import cycles or to defer a heavy module) run
only when that code path runs, so a module moved into a package, or a name moved to another
module, can leave one pointing nowhere while every test that never takes the path passes.
This test resolves them all statically, the way Python would at call time.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = ("reviewhub", "studies", "judges", "generation", "annotations", "snapshots",
               "calibration", "reports", "imports", "monitoring", "demo", "evalstats")


def _module_name(path: Path, root: Path) -> tuple[str, str]:
    """(dotted module name, the package relative imports resolve against)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _nested_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    top = set(map(id, tree.body))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top
    ]


def unresolved_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """`file:line: target` for every function-level first-party import that does not resolve
    (modules are looked up by `importlib`, names as submodules or module attributes)."""
    problems: list[str] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            _, base = _module_name(path, root)
            for node in _nested_imports(ast.parse(path.read_text(encoding="utf-8"))):
                where = f"{path.relative_to(root)}:{node.lineno}"
                if isinstance(node, ast.Import):
                    targets = [(a.name, None) for a in node.names]
                else:
                    relative = "." * node.level + (node.module or "")
                    try:
                        module = importlib.util.resolve_name(relative, base or None)
                    except ImportError:
                        problems.append(f"{where}: {relative}")
                        continue
                    targets = [(module, a.name) for a in node.names]
                for module, name in targets:
                    if module.split(".")[0] not in packages:
                        continue
                    if importlib.util.find_spec(module) is None:
                        problems.append(f"{where}: {module}")
                    elif name is not None and name != "*":
                        imported = importlib.import_module(module)
                        if hasattr(imported, name):
                            continue
                        is_package = hasattr(imported, "__path__")
                        if not is_package or importlib.util.find_spec(f"{module}.{name}") is None:
                            problems.append(f"{where}: {module}.{name}")
    return problems


def test_function_level_imports_resolve() -> None:
    assert unresolved_imports(ROOT, FIRST_PARTY) == []


def test_a_broken_function_level_import_is_reported(tmp_path: Path) -> None:
    # A relative import left behind when a module became a package: `.pricing` from inside
    # judges/runs/ now means judges.runs.pricing, which does not exist.
    pkg = tmp_path / "judges" / "runs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lifecycle.py").write_text(
        "def budget():\n    from .pricing import cost_for\n    from ..pricing import cost_for\n"
    )
    problems = unresolved_imports(tmp_path, ("judges",))
    assert problems == ["judges/runs/lifecycle.py:2: judges.runs.pricing"]
