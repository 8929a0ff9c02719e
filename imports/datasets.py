"""Converters from the public evaluation data sets to generic rating rows.

Each converter reads the source files and yields rows of the generic format
(`imports.generic`), so that the data sets go through exactly the same validation and
writing as any user's file. The mapping choices (documented in docs/import-ratings.md) follow
each data set's README and the published evaluation code.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studies.ingest.reading import STRICT_JSON, csv_dict_reader
from studies.models import Study

from .generic import ImportSummary, ScaleSpec, ratings_import, scale_parse

Row = tuple[int, dict[str, Any]]


@dataclass
class DatasetRows:
    """Rows plus what the generic importer needs to create criteria and families."""

    name: str
    rows: list[Row]
    scales: dict[str, ScaleSpec]
    families: dict[str, str] = field(default_factory=dict)
    description: str = ""


class DatasetError(Exception):
    """The source files are missing or not in the expected shape."""


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise DatasetError(f"missing data file {path}")
    # The ingest's strict decoder, as for every file ReviewHub reads.
    return STRICT_JSON.decode(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# PandaLM
# ---------------------------------------------------------------------------------------------

_PANDALM_HUMAN = {"0": "tie", "1": "A", "2": "B"}


def pandalm_judge_label(raw: Any) -> str:
    """PandaLM's rule (README / compute_metrics.py): "1" and "2" are wins; "Tie" and anything
    unparseable count as a tie."""
    text = str(raw).strip()
    return {"1": "A", "2": "B"}.get(text, "tie")


def pandalm_rows(data_dir: Path) -> DatasetRows:
    """PandaLM test set: 999 pairs, three annotators, gpt-3.5-turbo and PandaLM-7B verdicts.

    Items are `idx` (stratum `motivation_app`); the two responses are outputs of the candidates
    named in `cmp_key`; the comparison has A = response1 and every rater saw response1 first.
    """
    base = data_dir / "pandalm"
    items = _load_json(base / "testset-v1.json")
    judges = {
        "gpt-3.5-turbo": {
            str(r["idx"]): r["gpt_result"]
            for r in _load_json(base / "gpt-3.5-turbo-testset-v1.json")
        },
        "pandalm-7b": {
            str(r["idx"]): r["pandalm_result"]
            for r in _load_json(base / "pandalm-7b-testset-v1.json")
        },
    }
    rows: list[Row] = []
    for n, rec in enumerate(items, start=1):
        idx = str(rec["idx"])
        cand_a, _, cand_b = str(rec["cmp_key"]).partition("_")
        instruction = str(rec.get("instruction") or "")
        extra = str(rec.get("input") or "")
        common = {
            "item_id": idx,
            "item_input": instruction + (f"\n\n{extra}" if extra else ""),
            "stratum.motivation_app": rec["motivation_app"],
            "output_a": f"{idx}/{cand_a}",
            "output_b": f"{idx}/{cand_b}",
            "candidate_a": cand_a,
            "candidate_b": cand_b,
            "output_a_text": rec["response1"],
            "output_b_text": rec["response2"],
            "order": "ab",
            # Everyone saw response1 (= output_a) first, so both conventions read the same.
            "pairwise_values": "outputs",
            "criterion": "preference",
        }
        for k in (1, 2, 3):
            label = _PANDALM_HUMAN.get(str(rec[f"annotator{k}"]).strip())
            rows.append(
                (
                    n,
                    {
                        **common,
                        "rater_id": f"annotator{k}",
                        "rater_kind": "human",
                        "value": label if label is not None else str(rec[f"annotator{k}"]),
                    },
                )
            )
        for judge, results in judges.items():
            if idx in results:
                rows.append(
                    (
                        n,
                        {
                            **common,
                            "rater_id": judge,
                            "rater_kind": "judge",
                            "judge_version": "testset-v1",
                            "value": pandalm_judge_label(results[idx]),
                        },
                    )
                )
    return DatasetRows(
        name="pandalm",
        rows=rows,
        scales={"preference": ScaleSpec("pairwise")},
        # PandaLM-7B is fine-tuned from LLaMA-7B, one of the candidates: a real self-preference
        # case. gpt-3.5-turbo has no candidate of its family here.
        families={"pandalm-7b": "llama", "llama-7b": "llama", "gpt-3.5-turbo": "gpt"},
        description="PandaLM test set v1 (WeOpenML/PandaLM, Apache-2.0)",
    )


# ---------------------------------------------------------------------------------------------
# JUDGE-BENCH
# ---------------------------------------------------------------------------------------------

JUDGE_BENCH_FILES = {
    "newsroom": "newsroom.json",
    "dices-350-crowdsourced": "dices_350_crowdsourced.json",
    "dices-350-expert": "dices_350_expert.json",
    "dices-990": "dices_990.json",
    "recipes": "meta_evaluation_recipes.json",
}


def criterion_key(metric: str) -> str:
    """A criterion key (slug) for a data set's metric name."""
    return re.sub(r"[^a-z0-9_-]+", "-", metric.strip().lower()).strip("-") or "metric"


def judge_bench_rows(data_dir: Path, dataset: str) -> DatasetRows:
    """One JUDGE-BENCH file: items are instances, one output each; rater k is the k-th entry of
    `individual_human_scores` (a rating position, not a person), as in the authors' alpha.

    `graded` metrics become ordinal criteria worst..best, `categorical` ones categorical with
    the labels of `labels_list` (values matched case-insensitively).
    """
    key = dataset.replace("_", "-")
    if key not in JUDGE_BENCH_FILES:
        raise DatasetError(
            f"unknown JUDGE-BENCH data set {dataset!r} (one of {', '.join(JUDGE_BENCH_FILES)})"
        )
    doc = _load_json(data_dir / "judge-bench" / JUDGE_BENCH_FILES[key])
    scales: dict[str, ScaleSpec] = {}
    metrics: dict[str, str] = {}
    for ann in doc["annotations"]:
        ck = criterion_key(ann["metric"])
        metrics[ann["metric"]] = ck
        if ann["category"] == "graded":
            worst, best = int(ann["worst"]), int(ann["best"])
            if worst != 1:
                raise DatasetError(f"{ann['metric']}: graded scales must start at 1")
            scales[ck] = scale_parse(f"ordinal:1-{best}")
        elif ann["category"] == "categorical":
            scales[ck] = ScaleSpec("categorical", tuple(str(x) for x in ann["labels_list"]))
        else:
            raise DatasetError(f"{ann['metric']}: category {ann['category']!r} is not supported")
    rows: list[Row] = []
    for n, inst in enumerate(doc["instances"], start=1):
        annotations = inst["annotations"]
        if isinstance(annotations, str):
            # Some files store the per-instance annotations as a Python dict literal.
            annotations = ast.literal_eval(annotations)
        instance = inst["instance"]
        text = instance if isinstance(instance, str) else json.dumps(instance, ensure_ascii=False)
        item = str(inst["id"])
        for metric, ck in metrics.items():
            scores = (annotations.get(metric) or {}).get("individual_human_scores") or []
            for k, score in enumerate(scores, start=1):
                if score is None:
                    continue
                rows.append(
                    (
                        n,
                        {
                            "item_id": item,
                            "item_input": text,
                            "output_id": item,
                            "rater_id": f"pos{k}",
                            "rater_kind": "human",
                            "criterion": ck,
                            "value": score,
                        },
                    )
                )
    return DatasetRows(
        name=f"judge-bench:{key}",
        rows=rows,
        scales=scales,
        description=f"JUDGE-BENCH {doc.get('dataset', key)}",
    )


# ---------------------------------------------------------------------------------------------
# HANNA
# ---------------------------------------------------------------------------------------------

HANNA_CRITERIA = {
    "RE": "Relevance",
    "CH": "Coherence",
    "EM": "Empathy",
    "SU": "Surprise",
    "EG": "Engagement",
    "CX": "Complexity",
}
HANNA_LLMS = ("Beluga-13B", "Llama-13B", "Mistral-7B", "ChatGPT", "OrcaPlatypus")
_HANNA_FAMILIES = {
    "ChatGPT": "gpt",
    "GPT": "gpt",
    "GPT-2": "gpt",
    "GPT-2 (tag)": "gpt",
    "Llama-13B": "llama",
    "Beluga-13B": "llama",
    "OrcaPlatypus": "llama",
    "Mistral-7B": "mistral",
}


def hanna_rows(data_dir: Path, *, prompts: tuple[int, ...] = (1, 2, 3, 4)) -> DatasetRows:
    """HANNA with LLM ratings: items are the 96 writing prompts, candidates the 11 story
    sources (10 systems + Human), outputs the stories.

    Humans: "Human k XX" (k = rating position 1..3), ordinal 1..5 on six criteria. LLM judges:
    "<LLM> XX p" as judge <LLM>, version "prompt-p"; their scores are means over samples, so
    they are imported as continuous scores. BLEU is a continuous metric judge on Relevance.
    """
    path = data_dir / "hanna" / "hanna_metric_scores_llm.csv"
    if not path.is_file():
        raise DatasetError(f"missing data file {path}")
    with path.open(encoding="utf-8", newline="") as fh:
        table = list(csv_dict_reader(fh))
    if not table:
        raise DatasetError(f"{path} is empty")
    columns = list(table[0])
    bleu_col = next((c for c in columns if c.split(" ")[0] == "BLEU"), None)
    rows: list[Row] = []
    line = 0
    for rec in table:
        source = rec["Model"]
        parsed: dict[str, list[Any]] = {}

        def col(
            name: str, _rec: Mapping[str, str] = rec, _parsed: dict[str, list[Any]] = parsed
        ) -> list[Any]:
            if name not in _parsed:
                _parsed[name] = STRICT_JSON.decode(_rec[name])
            return _parsed[name]

        n_stories = len(col("Relevance"))
        for i in range(n_stories):
            line += 1
            rows.extend(_hanna_story_rows(line, source, i, rec, col, prompts, bleu_col))
    return DatasetRows(
        name="hanna",
        rows=rows,
        scales={c.lower(): scale_parse("ordinal:1-5") for c in HANNA_CRITERIA.values()},
        families=dict(_HANNA_FAMILIES),
        description="HANNA with LLM ratings (dig-team/hanna-benchmark-asg, MIT)",
    )



def _hanna_story_rows(
    line: int,
    source: str,
    i: int,
    rec: Mapping[str, str],
    col: Callable[[str], list[Any]],
    prompts: tuple[int, ...],
    bleu_col: str | None,
) -> list[Row]:
    """The ratings of story `i` of one source: per criterion the three humans, then every LLM
    judge per prompt the file has; then BLEU on relevance when the file has it."""
    rows: list[Row] = []
    base = {
        "item_id": f"prompt-{i + 1:02d}",
        "output_id": f"{source}/{i + 1:02d}",
        "candidate": source,
    }
    for xx, crit in HANNA_CRITERIA.items():
        ck = crit.lower()
        for k in (1, 2, 3):
            rows.append((line, {**base, "rater_id": f"human-{k}", "rater_kind": "human",
                                "criterion": ck, "value": col(f"Human {k} {xx}")[i]}))
        for llm in HANNA_LLMS:
            for p in prompts:
                name = f"{llm} {xx} {p}"
                if name not in rec:
                    continue
                rows.append((line, {**base, "rater_id": llm, "rater_kind": "judge",
                                    "judge_version": f"prompt-{p}", "value_type": "continuous",
                                    "criterion": ck, "value": col(name)[i]}))
    if bleu_col is not None:
        rows.append((line, {**base, "rater_id": "BLEU", "rater_kind": "judge",
                            "judge_version": "metric", "value_type": "continuous",
                            "criterion": "relevance", "value": col(bleu_col)[i]}))
    return rows


DATASETS = ("pandalm", *(f"judge-bench:{k}" for k in JUDGE_BENCH_FILES), "hanna")


def dataset_rows(name: str, data_dir: Path) -> DatasetRows:
    """Rows for a data set named as on the command line (see `DATASETS`)."""
    if name == "pandalm":
        return pandalm_rows(data_dir)
    if name == "hanna":
        return hanna_rows(data_dir)
    if name.startswith("judge-bench:"):
        return judge_bench_rows(data_dir, name.split(":", 1)[1])
    raise DatasetError(f"unknown data set {name!r} (one of {', '.join(DATASETS)})")


def iter_rows(ds: DatasetRows) -> Iterator[Row]:
    yield from ds.rows


def dataset_import(
    *, study: Study, name: str, data_dir: Path, created_by: Any = None
) -> ImportSummary:
    """Convert a public data set to generic rows and import them with `ratings_import`."""
    ds = dataset_rows(name, Path(data_dir))
    return ratings_import(
        study=study, rows=ds.rows, scales=ds.scales, families=ds.families, created_by=created_by
    )
