"""Imports between the apps point one way (ARCHITECTURE.md, "Layout").


An app may import any app to its right, never one to its left; only calibration, reports and
monitoring import evalstats, and evalstats imports no app. Every import statement of the first-party
packages is read with `ast` (module level, function level and `TYPE_CHECKING` blocks alike:
an import inside a function is still a dependency, only a later one), and each app -> app edge
must be in ALLOWED. A model looked up through the app registry (`apps.get_model("app", ...)`)
is an edge to that app too: it reaches the app's tables as surely as an import does. The few
edges that break the order today are listed one file at a time in KNOWN_EXCEPTIONS with the
reason, so that a new wrong edge fails and the list can only shrink.

Interfaces, not reach-ins: an underscored name (or an underscored module) is private to the
package it is defined in; importing it from any other module is a finding. PRIVATE_EXCEPTIONS
(by importing file or folder and owner module, with the reason) is empty and meant to stay so.

Imports at module level: a first-party import inside a function hides a dependency until the
call and usually a cycle. Only the places in LAZY_IMPORTS_ALLOWED may keep one (AppConfig.ready,
the kind registry, the Celery bootstrap); a cycle is untangled by moving the shared piece down.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APPS = ("reviewhub", "studies", "judges", "generation", "annotations", "snapshots", "calibration",
        "reports", "imports", "monitoring", "demo", "evalstats")
# Top-level packages that are not apps of the product.
NOT_APPS = {"tests", "bench"}

ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("studies", "reviewhub"),
    ("judges", "studies"), ("judges", "reviewhub"),
    # Candidate runs reuse the judge queue, provider clients and allow-lists.
    ("generation", "judges"), ("generation", "studies"), ("generation", "reviewhub"),
    # Annotators' work is sampled by judge disagreement.
    ("annotations", "judges"), ("annotations", "studies"), ("annotations", "reviewhub"),
    # The snapshot row, below calibration so that calibrated scores can hold a key to it.
    ("snapshots", "studies"), ("snapshots", "reviewhub"),
    ("calibration", "snapshots"),
    ("calibration", "annotations"), ("calibration", "judges"), ("calibration", "studies"),
    ("calibration", "reviewhub"), ("calibration", "evalstats"),
    ("reports", "snapshots"), ("reports", "calibration"), ("reports", "annotations"),
    ("reports", "judges"), ("reports", "studies"), ("reports", "reviewhub"),
    ("reports", "evalstats"),
    # The selection report's gates name the candidate runs that measured them.
    ("reports", "generation"),
    ("imports", "snapshots"), ("imports", "calibration"), ("imports", "annotations"),
    ("imports", "judges"), ("imports", "studies"), ("imports", "reviewhub"),
    # Monitoring watches a shipped candidate with the same instrument: it sits at the top
    # beside reports and imports.
    ("monitoring", "snapshots"), ("monitoring", "calibration"), ("monitoring", "annotations"),
    ("monitoring", "judges"), ("monitoring", "studies"), ("monitoring", "reviewhub"),
    ("monitoring", "evalstats"),
    # The Langfuse pull reads a generation with the Langfuse importer's own mapping
    # (imports.peers.langfuse.generation_mapped), so a file import and a pull read it alike.
    ("monitoring", "imports"),
    # The simulated demo seed walks the whole product (study file, outputs, simulated verdicts
    # and labels, a sampling plan, reports): it sits above every app and none imports it.
    *(("demo", app) for app in ("reviewhub", "studies", "judges", "generation", "annotations",
                                "snapshots", "calibration", "reports", "imports",
                                "monitoring")),
})

# (file, imported app) -> why the edge is tolerated for now. A file listed here may import
# that app at any line; any other file may not.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
}

# (importing file, or folder ending in "/"; owner module, or module prefix ending in ".") ->
# why it still imports underscored names from a module outside its own package.
PRIVATE_EXCEPTIONS: dict[tuple[str, str], str] = {}
# Not an exception: reviewhub/urls.py mounts every app's URLs by dotted string (`include(...)`),
# which is no import, so the URL root needs no entry here.


@dataclass(frozen=True)
class Edge:
    file: str
    line: int
    source: str
    target: str
    module: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.source} -> {self.target} (imports {self.module})"


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _get_model_targets(func: ast.AST | None, call: ast.Call, apps: tuple[str, ...]) -> set[str]:
    """The apps an `apps.get_model(...)` call reaches: its literal app label, or, when the label
    is a variable, every app label written as a string in the enclosing function."""
    if not call.args:
        return set()
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return {first.value.split(".")[0]}
    scope = func if func is not None else call
    return {node.value for node in ast.walk(scope)
            if isinstance(node, ast.Constant) and node.value in apps}


def _get_model_calls(tree: ast.AST) -> list[tuple[ast.AST | None, ast.Call]]:
    """Every `<anything>.get_model(...)` call with its enclosing function (None: module)."""
    found: list[tuple[ast.AST | None, ast.Call]] = []

    def visit(node: ast.AST, func: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and child.func.attr == "get_model"):
                found.append((func, child))
            visit(child, inner)

    visit(tree, None)
    return found


def _package_of(path: Path, root: Path) -> str:
    """The package that relative imports in `path` resolve against."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1])


def app_edges(root: Path, apps: tuple[str, ...] = APPS) -> list[Edge]:
    """Every import in the first-party packages that names another first-party app."""
    edges: list[Edge] = []
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            package = _package_of(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for func, call in _get_model_calls(tree):
                for target in sorted(_get_model_targets(func, call, apps)):
                    if target in apps and target != app:
                        edges.append(Edge(rel, call.lineno, app, target, "apps.get_model"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        relative = "." * node.level + (node.module or "")
                        modules = [importlib.util.resolve_name(relative, package)]
                    else:
                        modules = [node.module or ""]
                else:
                    continue
                for module in modules:
                    target = module.split(".")[0]
                    if target in apps and target != app:
                        edges.append(Edge(rel, node.lineno, app, target, module))
    return edges


def _private(part: str) -> bool:
    return part.startswith("_") and not part.endswith("__")


@dataclass(frozen=True)
class PrivateUse:
    file: str
    line: int
    name: str  # dotted: the module imported from and the name
    owner: str  # the module (or package) the underscored part is private to

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.name} (private to {self.owner})"


def private_uses(root: Path, apps: tuple[str, ...] = APPS) -> list[PrivateUse]:
    """Every import of an underscored first-party name or module from outside where it belongs:
    `_x` in a public module `a.b.m` belongs to `a.b.m`; a module `a.b._m`, with everything in it,
    to the package `a.b`."""
    found: list[PrivateUse] = []
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            me, package = _module_of(path, root), _package_of(path, root)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
                if isinstance(node, ast.ImportFrom):
                    base = (importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                        package)
                            if node.level else node.module or "")
                    names = [f"{base}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    parts = name.split(".")
                    if parts[0] not in apps:
                        continue
                    first = next((i for i, p in enumerate(parts) if _private(p)), None)
                    if first is None:
                        continue
                    # An underscored module (and all it holds) belongs to the package that holds
                    # it; an underscored name in a public module belongs to that module.
                    owner = ".".join(parts[:first] if first < len(parts) - 1 else parts[:-1])
                    if me == owner or me.startswith(owner + "."):
                        continue
                    found.append(PrivateUse(rel, node.lineno, name, owner))
    return found


def _private_exception(use: PrivateUse) -> tuple[str, str] | None:
    for key in PRIVATE_EXCEPTIONS:
        where, owner = key
        file_ok = use.file.startswith(where) if where.endswith("/") else use.file == where
        owner_ok = use.owner.startswith(owner) if owner.endswith(".") else use.owner == owner
        if file_ok and owner_ok:
            return key
    return None


def disallowed(edges: list[Edge]) -> list[Edge]:
    return [
        e for e in edges
        if (e.source, e.target) not in ALLOWED and (e.file, e.target) not in KNOWN_EXCEPTIONS
    ]


def test_every_app_to_app_import_follows_the_order() -> None:
    wrong = disallowed(app_edges(ROOT))
    assert not wrong, (
        "imports against the app order of ARCHITECTURE.md (call down to the app on the "
        "right, or move the code):\n" + "\n".join(map(str, wrong))
    )


def test_known_exceptions_are_still_needed() -> None:
    present = {(e.file, e.target) for e in app_edges(ROOT)}
    gone = sorted(f"{file} -> {target}" for file, target in KNOWN_EXCEPTIONS
                  if (file, target) not in present)
    assert not gone, "no longer imported; remove from KNOWN_EXCEPTIONS: " + ", ".join(gone)


def test_no_module_imports_another_modules_private_names() -> None:
    wrong = [use for use in private_uses(ROOT) if _private_exception(use) is None]
    assert not wrong, (
        "underscored names are private to their module (underscored modules to their "
        "package): give the module a public function for what is needed, or move the code:\n"
        + "\n".join(map(str, wrong))
    )


def test_private_exceptions_are_still_needed() -> None:
    used = {_private_exception(use) for use in private_uses(ROOT)}
    gone = sorted(f"{where} -> {owner}" for where, owner in PRIVATE_EXCEPTIONS
                  if (where, owner) not in used)
    assert not gone, "no longer used; remove from PRIVATE_EXCEPTIONS: " + ", ".join(gone)


def test_the_private_check_sees_names_and_modules(tmp_path: Path) -> None:
    """The check can fail: an underscored name of a module used by another module, or an
    underscored module used outside its package, is found; what a private module holds is its
    package's to share."""
    (tmp_path / "studies" / "pkg").mkdir(parents=True)
    (tmp_path / "judges").mkdir()
    for init in ("studies/__init__.py", "studies/pkg/__init__.py", "judges/__init__.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "studies" / "pkg" / "_inner.py").write_text("def _h(): ...\ndef g(): ...\n")
    (tmp_path / "studies" / "pkg" / "public.py").write_text("def _k(): ...\n")
    (tmp_path / "studies" / "pkg" / "a.py").write_text(
        "from ._inner import _h, g\n"  # a private module, from its own package: fine
        "from studies.pkg.public import _k\n"  # a private name of a sibling module: found
    )
    (tmp_path / "judges" / "b.py").write_text(
        "def f():\n"
        "    from studies.pkg._inner import g\n"  # a private module, from another app
        "    import studies.pkg._inner\n"
    )
    assert sorted(str(u) for u in private_uses(tmp_path)) == [
        "judges/b.py:2: imports studies.pkg._inner.g (private to studies.pkg)",
        "judges/b.py:3: imports studies.pkg._inner (private to studies.pkg)",
        "studies/pkg/a.py:2: imports studies.pkg.public._k (private to studies.pkg.public)",
    ]


def test_the_walk_sees_get_model_lookups(tmp_path: Path) -> None:
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "__init__.py").write_text("")
    (tmp_path / "studies" / "services.py").write_text(
        "from django.apps import apps\n"
        "def f():\n"
        "    apps.get_model('annotations', 'SamplingPlan')\n"
        "def g():\n"
        "    for label, model in (('judges', 'Verdict'), ('studies', 'Item')):\n"
        "        apps.get_model(label, model)\n"
        "def h():\n"
        "    apps.get_model('reviewhub.Heartbeat')\n"
    )
    assert sorted(map(str, app_edges(tmp_path))) == [
        "studies/services.py:3: studies -> annotations (imports apps.get_model)",
        "studies/services.py:6: studies -> judges (imports apps.get_model)",
        "studies/services.py:8: studies -> reviewhub (imports apps.get_model)",
    ]


def test_known_exceptions_are_not_allowed_edges() -> None:
    # An exception for an edge that the order allows would hide nothing and never shrink.
    redundant = [key for key in KNOWN_EXCEPTIONS
                 if (key[0].split("/")[0], key[1]) in ALLOWED]
    assert not redundant


def test_every_top_level_package_is_placed_in_the_order() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - NOT_APPS
    assert packages <= set(APPS), f"add {sorted(packages - set(APPS))} to APPS and ALLOWED"


def test_the_walk_sees_function_level_relative_and_type_checking_imports(tmp_path: Path) -> None:
    """The check can fail: wrong edges at every depth are found and named by file and line."""
    (tmp_path / "studies" / "sub").mkdir(parents=True)
    (tmp_path / "reports").mkdir()
    (tmp_path / "studies" / "__init__.py").write_text("")
    (tmp_path / "studies" / "sub" / "__init__.py").write_text("")
    (tmp_path / "studies" / "sub" / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import models\n"  # relative, stays inside studies
        "if TYPE_CHECKING:\n"
        "    from judges.models import Verdict\n"
        "def f():\n"
        "    import reports.services\n"
    )
    (tmp_path / "reports" / "__init__.py").write_text("import studies.models as m\n")
    edges = app_edges(tmp_path)
    assert sorted(map(str, disallowed(edges))) == [
        "studies/sub/mod.py:4: studies -> judges (imports judges.models)",
        "studies/sub/mod.py:6: studies -> reports (imports reports.services)",
    ]
    assert [str(e) for e in edges if e.source == "reports"] == [
        "reports/__init__.py:1: reports -> studies (imports studies.models)"
    ]


# Where a first-party import may stay inside a function: (file, or "*/" + a file name for that
# file in every app; function name, or "*" for any) -> why.
LAZY_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("*/apps.py", "ready"):
        "AppConfig.ready is Django's registration point: what needs the models (and the "
        "registrations into another app) can be imported only once the app registry is ready",
    ("reports/kinds.py", "*"):
        "the kind registry imports each kind's package when the kind is first asked for, so "
        "that the registry stays importable by the modules every kind imports",
    ("reviewhub/__init__.py", "__getattr__"):
        "the Celery app bootstrap: importing Celery loads Django, which the pure modules of the "
        "package (reviewhub.errors, reviewhub.api.strictjson) must import without",
}


@dataclass(frozen=True)
class FunctionImport:
    file: str
    line: int
    function: str
    module: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: imports {self.module} inside {self.function}()"


def _imported_modules(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        if node.level:
            return [importlib.util.resolve_name("." * node.level + (node.module or ""), package)]
        return [node.module or ""]
    return [alias.name for alias in node.names]


def _imports_in_functions(node: ast.AST, func: str | None, package: str,
                          apps: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(line, function, module) of every first-party import below `node` inside a function."""
    found: list[tuple[int, str, str]] = []
    for child in ast.iter_child_nodes(node):
        if func is not None and isinstance(child, ast.Import | ast.ImportFrom):
            found += [(child.lineno, func, module) for module in _imported_modules(child, package)
                      if module.split(".")[0] in apps]
        inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
        found += _imports_in_functions(child, inner, package, apps)
    return found


def function_imports(root: Path, apps: tuple[str, ...] = APPS) -> list[FunctionImport]:
    """Every first-party import (another app's or the package's own, relative ones included)
    made inside a function or method, at any depth."""
    found: list[FunctionImport] = []
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            found += [FunctionImport(rel, line, func, module) for line, func, module
                      in _imports_in_functions(tree, None, _package_of(path, root), apps)]
    return found


def _lazy_allowance(use: FunctionImport) -> tuple[str, str] | None:
    for key in LAZY_IMPORTS_ALLOWED:
        where, function = key
        file_ok = (use.file.endswith("/" + where[2:]) if where.startswith("*/")
                   else use.file == where)
        if file_ok and function in ("*", use.function):
            return key
    return None


def test_first_party_imports_sit_at_module_level() -> None:
    wrong = [use for use in function_imports(ROOT) if _lazy_allowance(use) is None]
    assert not wrong, (
        "import first-party modules at module level; if a cycle forces the import into the "
        "function, untangle it (move the shared piece down into a module both can import):\n"
        + "\n".join(map(str, wrong))
    )


def test_lazy_import_allowances_are_still_needed() -> None:
    used = {_lazy_allowance(use) for use in function_imports(ROOT)}
    gone = sorted(f"{where} {function}" for where, function in LAZY_IMPORTS_ALLOWED
                  if (where, function) not in used)
    assert not gone, "no longer used; remove from LAZY_IMPORTS_ALLOWED: " + ", ".join(gone)


def test_the_function_import_check_sees_every_depth(tmp_path: Path) -> None:
    """The check can fail: first-party imports in functions, methods and nested functions are
    found (relative ones too), a standard-library import is not, and only the allowed places
    pass."""
    (tmp_path / "judges").mkdir()
    (tmp_path / "reports").mkdir()
    for init in ("judges/__init__.py", "reports/__init__.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "judges" / "a.py").write_text(
        "import studies.models\n"  # module level: fine
        "def f():\n"
        "    import json\n"  # not first-party
        "    from studies.models import Study\n"
        "    def g():\n"
        "        from . import b\n"
        "class C:\n"
        "    def m(self):\n"
        "        import judges.b as jb\n"
    )
    (tmp_path / "judges" / "apps.py").write_text(
        "class Config:\n"
        "    def ready(self):\n"
        "        from .selectors import x\n"  # Django's registration point: allowed
        "    def other(self):\n"
        "        from .selectors import y\n"
    )
    (tmp_path / "reports" / "kinds.py").write_text(
        "def _agreement_kind():\n"
        "    from .agreement.kind import agreement_kind\n"  # the kind registry: allowed
    )
    (tmp_path / "reports" / "services.py").write_text(
        "def report_build():\n"
        "    from .celery_tasks import report_compute_task\n"
    )
    found = function_imports(tmp_path)
    assert sorted(str(u) for u in found if _lazy_allowance(u) is None) == [
        "judges/a.py:4: imports studies.models inside f()",
        "judges/a.py:6: imports judges inside g()",
        "judges/a.py:9: imports judges.b inside m()",
        "judges/apps.py:5: imports judges.selectors inside other()",
        "reports/services.py:2: imports reports.celery_tasks inside report_build()",
    ]
    assert sorted(str(u) for u in found if _lazy_allowance(u) is not None) == [
        "judges/apps.py:3: imports judges.selectors inside ready()",
        "reports/kinds.py:2: imports reports.agreement.kind inside _agreement_kind()",
    ]
