"""Check or rewrite the golden report outputs in tests/golden/<case>/.

    python tests/golden/update.py            # compare (the same as running the test)
    python tests/golden/update.py --update   # rewrite the files from the code as it is
    python tests/golden/update.py --update -k demo   # one case

Runs tests/reports/test_outputs_unchanged.py with pytest from the repository root (PostgreSQL:
DATABASE_URL; the real data: REVIEWHUB_DATA_DIR). Rewrite only from a tree whose outputs are
known good, and commit the changed files beside the change that explains them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the golden files")
    parser.add_argument("-k", default=None, help="only the cases matching (pytest -k)")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.update:
        env["REVIEWHUB_GOLDEN_UPDATE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/reports/test_outputs_unchanged.py"]
    if args.k:
        cmd += ["-k", args.k]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
