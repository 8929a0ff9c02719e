"""evalstats' boundary: it imports without Django, and nothing outside it uses its private names.

Callers (reports, calibration, bench, the other test folders) use the public API listed in
`evalstats/__init__.py`; underscored modules (`evalstats._kernels`, `evalstats._data`) and
underscored names are free to change. Only evalstats itself and its own tests
(tests/evalstats) may reach them.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import evalstats

ROOT = Path(__file__).resolve().parents[2]
# Folders without Python source of the product, and evalstats with its own tests.
SKIP_DIRS = {"evalstats", "var", "static", "templates", "docs", "node_modules", "__pycache__"}
REQUIRED = {"reviewhub", "studies", "judges", "annotations", "reports", "bench"}


def test_every_evalstats_module_imports_without_django() -> None:
    modules = sorted(m.name for m in pkgutil.walk_packages(evalstats.__path__, "evalstats."))
    assert {"evalstats.clustered", "evalstats.options", "evalstats._kernels"} <= set(modules)
    code = (
        "import importlib, sys\n"
        "import evalstats\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not loaded, loaded\n"
        "assert 'rest_framework' not in sys.modules\n"
    )
    # A clean interpreter: this test process has Django loaded already (pytest-django).
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _private(dotted: str) -> bool:
    """``evalstats._x`` / ``evalstats.y._z``: any underscored part (dunders are public)."""
    return any(p.startswith("_") and not p.endswith("__") for p in dotted.split(".")[1:])


def private_uses(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for every use of an underscored evalstats module or name in ``source``."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> the evalstats module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "evalstats" or a.name.startswith("evalstats."):
                    if _private(a.name):
                        yield node.lineno, f"import {a.name}"
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases["evalstats"] = "evalstats"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mod = node.module
            if mod != "evalstats" and not mod.startswith("evalstats."):
                continue
            if _private(mod):
                yield node.lineno, f"from {mod} import ..."
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.endswith("__"):
                    yield node.lineno, f"from {mod} import {a.name}"
                aliases[a.asname or a.name] = f"{mod}.{a.name}"
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("evalstats.")
            and _private(node.args[0].value)
        ):
            yield node.lineno, f"dynamic import of {node.args[0].value}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not (
            node.attr.endswith("__") or not node.attr.startswith("_")
        ):
            base = node.value
            parts = []
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                dotted = ".".join([aliases[base.id], *reversed(parts), node.attr])
                yield node.lineno, dotted


def product_sources() -> Iterator[Path]:
    """Python files of every package and script outside evalstats and tests/evalstats."""
    for path in sorted(ROOT.glob("*.py")):
        yield path
    for top in sorted(ROOT.iterdir()):
        if not top.is_dir() or top.name.startswith(".") or top.name in SKIP_DIRS:
            continue
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if rel[:2] == ("tests", "evalstats") or any(p.startswith(".") for p in rel):
                continue
            yield path


def test_nothing_outside_evalstats_uses_its_private_names() -> None:
    files = list(product_sources())
    tops = {p.relative_to(ROOT).parts[0] for p in files}
    assert tops >= REQUIRED, REQUIRED - tops
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in files
        for line, what in private_uses(path.read_text(encoding="utf-8"))
    ]
    assert not found, "private evalstats names used outside evalstats:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from evalstats import _kernels as K",
        "import evalstats._kernels",
        "import evalstats._data as d",
        "from evalstats._data import paired",
        "from evalstats.bootstrap import _cells_estimates",
        "import evalstats as es\nes._kernels.weight_matrix(3, None)",
        "import evalstats\nevalstats.bootstrap._collapse",
        "from evalstats import clustered as cl\ncl._MAX_TABLE_CELLS",
        "import importlib\nimportlib.import_module('evalstats._kernels')",
    ],
)
def test_the_checker_finds_private_uses(source: str) -> None:
    assert list(private_uses(source)), source


def test_the_checker_allows_the_public_api() -> None:
    source = (
        "import evalstats as es\n"
        "from evalstats import clustered as cl\n"
        "from evalstats.clustered import rank_corr_rows\n"
        "from evalstats.options import BootstrapOptions\n"
        "es.nominal_agreement, cl.kappa_fn, es.__all__, es.BootstrapOptions().n_resamples\n"
        "other._private\n"
    )
    assert list(private_uses(source)) == []


def test_every_public_module_is_listed_and_its_functions_are_re_exported() -> None:
    """The package docstring is the index of the stable API: it names every public module, and
    each public function of a module is reachable from `evalstats` itself as the same object
    (constants, type aliases and the StatFn factories the docstring names stay module-level)."""
    import importlib
    import inspect

    modules = sorted(m.name for m in pkgutil.walk_packages(evalstats.__path__, "evalstats.")
                     if not _private(m.name))
    doc = evalstats.__doc__ or ""
    for name in modules:
        mod = importlib.import_module(name)
        short = name.split(".")[-1]
        assert f"\n{short}:" in doc, f"the docstring does not list {name}"
        for attr in getattr(mod, "__all__", ()):
            obj = getattr(mod, attr)
            if attr in evalstats.__all__:
                assert getattr(evalstats, attr) is obj, f"{name}.{attr}"
            elif inspect.isfunction(obj) or inspect.isclass(obj):
                # Module-level helpers must at least be named in the index.
                assert attr in doc, f"{name}.{attr} is neither re-exported nor listed"
    for attr in evalstats.__all__:
        assert hasattr(evalstats, attr), attr
