"""Importers: the generic long ratings format and the public data sets built on top of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studies.models import Study

from .datasets import DATASETS, DatasetError, DatasetRows, dataset_rows
from .generic import (
    ImportSummary,
    ReadError,
    ScaleSpec,
    importer_username,
    ratings_import,
    ratings_read,
    ratings_validate,
    scale_parse,
)

__all__ = [
    "DATASETS",
    "DatasetError",
    "DatasetRows",
    "ImportSummary",
    "ReadError",
    "ScaleSpec",
    "dataset_import",
    "dataset_rows",
    "importer_username",
    "ratings_import",
    "ratings_read",
    "ratings_validate",
    "scale_parse",
]


def dataset_import(
    *, study: Study, name: str, data_dir: Path, created_by: Any = None
) -> ImportSummary:
    """Convert a public data set to generic rows and import them with `ratings_import`."""
    ds = dataset_rows(name, Path(data_dir))
    return ratings_import(
        study=study, rows=ds.rows, scales=ds.scales, families=ds.families, created_by=created_by
    )
