"""Count production functions longer than a limit, and production modules over a limit.

    python bench/long_functions.py                  # functions > 80 lines, modules > 800
    python bench/long_functions.py --list           # and name each one
    python bench/long_functions.py --under reports  # only one folder

Production code is every .py file of the repository except tests/, bench/, migrations and the
virtual environment. A function's length is its lines from `def` (decorators excluded) to its
last line, nested functions included in their parent (a nested one is also counted itself).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "bench", "migrations", ".venv", "node_modules", ".git", "static", "docs"}


def production_files(under: str | None = None) -> list[Path]:
    base = ROOT / under if under else ROOT
    return sorted(p for p in base.rglob("*.py")
                  if not SKIP.intersection(p.relative_to(ROOT).parts))


def long_functions(path: Path, limit: int) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > limit:
                    found.append((f"{prefix}{child.name}", length))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--module-limit", type=int, default=800)
    parser.add_argument("--under", default=None)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    functions: list[tuple[str, str, int]] = []
    modules: list[tuple[str, int]] = []
    for path in production_files(args.under):
        rel = str(path.relative_to(ROOT))
        functions += [(rel, name, n) for name, n in long_functions(path, args.limit)]
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > args.module_limit:
            modules.append((rel, lines))
    print(f"production functions over {args.limit} lines: {len(functions)}")
    print(f"production modules over {args.module_limit} lines: {len(modules)}")
    if args.list:
        for rel, name, n in sorted(functions, key=lambda t: -t[2]):
            print(f"  {n:4d}  {rel}:{name}")
        for rel, n in sorted(modules, key=lambda t: -t[1]):
            print(f"  {n:4d}  {rel} (module)")


if __name__ == "__main__":
    main()
