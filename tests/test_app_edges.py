"""Imports between the apps point one way (ARCHITECTURE.md, "Layout").

    imports, monitoring, reports -> calibration -> annotations -> judges -> studies -> reviewhub

An app may import any app to its right, never one to its left; only calibration, reports and
monitoring import evalstats, and evalstats imports no app. Every import statement of the first-party
packages is read with `ast` (module level, function level and `TYPE_CHECKING` blocks alike:
an import inside a function is still a dependency, only a later one), and each app -> app edge
must be in ALLOWED. The few edges that break the order today are listed one file at a time in
KNOWN_EXCEPTIONS with the reason, so that a new wrong edge fails and the list can only shrink.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APPS = ("reviewhub", "studies", "judges", "annotations", "calibration", "reports", "imports",
        "monitoring", "evalstats")
# Top-level packages that are not apps of the product.
NOT_APPS = {"tests", "bench"}

ALLOWED: frozenset[tuple[str, str]] = frozenset({
    ("studies", "reviewhub"),
    ("judges", "studies"), ("judges", "reviewhub"),
    # Annotators' work is sampled by judge disagreement.
    ("annotations", "judges"), ("annotations", "studies"), ("annotations", "reviewhub"),
    ("calibration", "annotations"), ("calibration", "judges"), ("calibration", "studies"),
    ("calibration", "reviewhub"), ("calibration", "evalstats"),
    ("reports", "calibration"), ("reports", "annotations"), ("reports", "judges"),
    ("reports", "studies"), ("reports", "reviewhub"), ("reports", "evalstats"),
    ("imports", "calibration"), ("imports", "annotations"), ("imports", "judges"),
    ("imports", "studies"), ("imports", "reviewhub"),
    # Monitoring watches a shipped candidate with the same instrument: it sits at the top
    # beside reports and imports.
    ("monitoring", "calibration"), ("monitoring", "annotations"), ("monitoring", "judges"),
    ("monitoring", "studies"), ("monitoring", "reviewhub"), ("monitoring", "evalstats"),
})

# (file, imported app) -> why the edge is tolerated for now. A file listed here may import
# that app at any line; any other file may not.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("reviewhub/pages.py", "studies"):
        "page helpers resolve the study of a page and the actor's membership; the study "
        "lookup belongs in studies (or the capability module) with pages calling down to it",
    ("reviewhub/templatetags/reviewhub_ui.py", "studies"):
        "the navigation tag reads the actor's study role to show the study's menu",
    ("imports/management/commands/demo_seed.py", "reports"):
        "the demo builds its sample report through reports.services (imports and reports "
        "sit at the same level of the order)",
}
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
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
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
