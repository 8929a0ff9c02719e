"""The words of a refused JSON upload read as a sentence: no word said twice in a row ("at at"),
in the error's message or in any problem as the data page shows it (line, path, message)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .factories_ingest import post, seeded

__all__ = ["seeded"]  # the fixture, imported for pytest

DOUBLED = re.compile(r"\b(\w+)\s+\1\b", re.IGNORECASE)

# Bodies that a JSON array or JSON Lines upload can get wrong, one way each.
BAD_BODIES: list[tuple[str, bytes]] = [
    ("json", b'[{"external_id": "i1", "input": "x",}]'),
    ("json", b'[{"external_id": "i1", "input": "x"}'),
    ("json", b'[{"external_id": "i1", "input": "x"}, 3]'),
    ("json", b'[{"external_id": "i1", "input": "x", "input": "y"}]'),
    ("json", b'[{"external_id": "i1", "input": "x", "metadata": {"a": 1e400}}]'),
    ("json", b'[{"external_id": "i1", "input": "x", "metadata": {"a": "\\u0000"}}]'),
    ("json", b'[{"external_id": "i1", "input": "x", "metadata": {"a": NaN}}]'),
    ("json", b'{"external_id": "i1", "input": "x"}'),
    ("ndjson", b'{"external_id": "i1", "input": "x"}\n{"external_id": "i2", "input": }\n'),
    ("ndjson", b'{"external_id": "i1", "input": "x", "metadata": {"b": {"c": "\\ud800"}}}\n'),
    ("ndjson", b'[1, 2]\n'),
    ("ndjson", b'{"external_id": "i1", "input": "x"}\n{"external_id": "i1", "input": "y"}\n'),
    ("ndjson", b'{"external_id": "i1", "input": "\xff"}\n'),
]


def _shown(problem: dict[str, Any]) -> str:
    """A problem as static/js/ingest_upload.js writes it on the data page."""
    where = f"line {problem['line']}" if problem.get("line") else ""
    if problem.get("line") and problem.get("index") is not None:
        where += f" (element [{problem['index']}])"
    path = problem.get("path") or ""
    return (where + (", " if where and path else "") + path
            + (": " if where or path else "") + str(problem.get("message") or ""))


@pytest.mark.django_db
@pytest.mark.parametrize(("fmt", "body"), BAD_BODIES)
def test_refused_json_uploads_never_say_a_word_twice(lead_client: Any, study: Any, fmt: str,
                                                     body: bytes) -> None:
    response = post(lead_client, "alpha", "items", body, fmt)
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    texts = [error["message"]] + [_shown(p) for p in error.get("details", {}).get("errors", [])]
    for text in texts:
        assert not DOUBLED.search(text), text
