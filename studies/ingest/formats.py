"""What an ingest file is: the kinds of rows, the file formats, and how a request's
Content-Type or a file name selects the format.

Pure Python (no Django), like the readers that use these names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from reviewhub.errors import UnsupportedMediaType

Kind = Literal["items", "candidates", "outputs"]
Format = Literal["json", "ndjson", "csv"]
Strategy = Literal["auto", "copy", "orm"]
KINDS: tuple[Kind, ...] = ("items", "candidates", "outputs")


CONTENT_TYPES: dict[str, Format] = {
    "application/json": "json",
    "application/x-ndjson": "ndjson",
    "application/jsonl": "ndjson",
    "application/x-jsonlines": "ndjson",
    "text/csv": "csv",
}
EXTENSIONS: dict[str, Format] = {
    ".json": "json",
    ".jsonl": "ndjson",
    ".ndjson": "ndjson",
    ".csv": "csv",
}


# --------------------------------------------------------------------------------------------
# Content types and file names
# --------------------------------------------------------------------------------------------


def format_for_content_type(content_type: str) -> Format:
    """The ingest format of a request's Content-Type, or raise UnsupportedMediaType (415)."""
    mime, _, params = (content_type or "").partition(";")
    fmt = CONTENT_TYPES.get(mime.strip().lower())
    if fmt is None:
        raise UnsupportedMediaType(
            f"Content-Type '{mime.strip() or '(none)'}' is not supported; send "
            "application/json (a JSON array), application/x-ndjson (JSON Lines) or text/csv.",
            details={"supported": sorted(CONTENT_TYPES)},
        )
    for param in params.split(";"):
        key, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if key.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise UnsupportedMediaType(
                f"charset '{charset}' is not supported; ingest files must be UTF-8."
            )
    return fmt


def format_for_path(path: str | Path) -> Format | None:
    """The ingest format implied by a file name's extension, if any."""
    return EXTENSIONS.get(Path(path).suffix.lower())
