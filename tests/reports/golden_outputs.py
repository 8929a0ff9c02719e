"""What the agreement, calibration and selection reports show, rendered as files to compare
byte for byte.

`artefacts(study)` builds one calibration, one selection and then one agreement snapshot of a
study through the snapshot lifecycle (reports.services) and fetches, through the URLs a user or
a client calls, every output a reader sees: the stored result JSON, the CSV tables (selection,
agreement export), the calibrated scores CSV export, the SVG charts, the PDF's text, and the
pages (selection list and detail, calibration, agreement audit and disagreements, the list of
every kind's reports). Each is returned as text with only what changes from run to run
replaced (CSRF tokens, dates, matplotlib's random ids), keyed by a file name under
tests/golden/<case>/.

The studies (`CASES`) are the SIMULATED demo (`manage.py demo_seed`, fixed seeds) and the
visible real data the other tests import from $REVIEWHUB_DATA_DIR: PandaLM, HANNA (with the
pass threshold a lead sets, as in tests/calibration/test_real_data.py) and JUDGE-BENCH
NewsRoom. tests/reports/test_outputs_unchanged.py compares them with tests/golden/;
`python tests/golden/update.py --update` rewrites the golden files (see tests/golden/README.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from reports.services import report_compute, report_snapshot_create
from snapshots.models import ReportSnapshot
from studies.models import Study

# Small bootstrap counts: the figures need only be the same run to run, not precise.
CALIBRATION_PARAMS: dict[str, Any] = {"n_resamples": 20, "curve_resamples": 20, "seed": 5}
SELECTION_PARAMS: dict[str, Any] = {"n_resamples": 100, "seed": 1}
AGREEMENT_PARAMS: dict[str, Any] = {"n_resamples": 100, "seed": 3, "system_level": True,
                                    "by_candidate": True}

# Texts that differ between two runs of the same code on the same data, and what replaces them.
_VOLATILE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'name="csrfmiddlewaretoken" value="[^"]*"'),
     'name="csrfmiddlewaretoken" value="CSRF"'),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"),
     "DATETIME"),
    (re.compile(r'<time datetime="[^"]*"'), '<time datetime="DATETIME"'),
]


def normalise(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def svg_normalise(text: str) -> str:
    """matplotlib names clip paths and glyphs by a hash; renumber every id by first use."""
    return normalise(_svg_ids(text))


def _svg_ids(text: str) -> str:
    ids: dict[str, str] = {}
    for m in re.finditer(r'\bid="([^"]+)"', text):
        ids.setdefault(m.group(1), f"id{len(ids)}")
    if not ids:
        return text
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(k) for k in
                                                   sorted(ids, key=len, reverse=True))
                         + r")(?![\w-])")
    return pattern.sub(lambda m: ids[m.group(1)], text)


def snapshot_compute(study: Study, kind: str, params: dict[str, Any]) -> ReportSnapshot:
    report = report_snapshot_create(study=study, kind=kind, params=params,
                                    created_by=study.owner)
    return report_compute(report_id=report.pk)


def _pdf_text(client: Client, url: str) -> tuple[int, str]:
    """The PDF view's response status and the text of its laid-out document.

    WeasyPrint's document is caught on its way to `write_pdf` (the PDF bytes carry a creation
    date); its boxes are read page by page."""
    import weasyprint

    documents: list[Any] = []
    original = weasyprint.HTML.render

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        doc = original(self, *args, **kwargs)
        documents.append(doc)
        return doc

    weasyprint.HTML.render = spy
    try:
        response = client.get(url)
    finally:
        weasyprint.HTML.render = original
    pages: list[str] = []

    def walk(box: Any, parts: list[str]) -> None:
        text = getattr(box, "text", None)
        if isinstance(text, str) and text:
            parts.append(text)
        for child in getattr(box, "children", None) or ():
            walk(child, parts)

    for doc in documents:
        for page in doc.pages:
            parts: list[str] = []
            walk(page._page_box, parts)
            pages.append(" ".join(parts))
    return response.status_code, "\n\f\n".join(pages) + "\n"


def _get(client: Client, url: str) -> tuple[int, str]:
    response = client.get(url)
    body = (b"".join(response.streaming_content) if response.streaming  # type: ignore[attr-defined]
            else response.content)
    return response.status_code, body.decode("utf-8")


def artefacts(study: Study) -> dict[str, str]:
    """Every output of a calibration, a selection and an agreement snapshot of `study`, by file
    name."""
    from tests.factories import api_token_create

    out: dict[str, str] = {}
    calibration = snapshot_compute(study, "calibration", dict(CALIBRATION_PARAMS))
    selection = snapshot_compute(study, "selection", dict(SELECTION_PARAMS))
    for name, snap in (("calibration", calibration), ("selection", selection)):
        out[f"{name}.json"] = json.dumps(
            {"status": snap.status, "error": snap.error, "params": snap.params,
             "result_version": snap.result_version,
             "input_fingerprint": snap.input_fingerprint, "result": snap.result},
            indent=1, sort_keys=True) + "\n"
    client = Client()
    client.force_login(study.owner)
    slug = study.slug
    pages: dict[str, str] = {
        "selection-page.html": reverse("reports-selection", kwargs={"slug": slug}),
        "selection-detail.html": reverse("reports-selection-detail",
                                         kwargs={"slug": slug, "snapshot_id": selection.pk}),
        "calibration-page.html": reverse("reports-calibration", kwargs={"slug": slug})
        + f"?snapshot={calibration.pk}",
    }
    svgs: dict[str, str] = {}
    if isinstance(selection.result, dict):
        n_metrics = len(selection.result.get("metrics") or [])
        for table in ("estimates", "differences", "flips", "gates", "thresholds", "frontier",
                      "public_vs_private", "next_labels", "rankings", "pairwise",
                      "bradley_terry", "deviations"):
            pages[f"selection-{table}.csv"] = reverse(
                "reports-selection-csv",
                kwargs={"slug": slug, "snapshot_id": selection.pk, "table": table})
        # One forest plot per metric, and the first index past them (a 404).
        for index in range(n_metrics + 1):
            svgs[f"selection-forest-{index}.svg"] = reverse(
                "reports-selection-forest",
                kwargs={"slug": slug, "snapshot_id": selection.pk, "metric": index})
        svgs["selection-pareto.svg"] = reverse(
            "reports-selection-pareto", kwargs={"slug": slug, "snapshot_id": selection.pk})
        status, text = _pdf_text(client, reverse(
            "reports-selection-pdf", kwargs={"slug": slug, "snapshot_id": selection.pk}))
        out["selection-pdf.txt"] = f"status {status}\n" + normalise(text)
    if isinstance(calibration.result, dict):
        for index in range(len(calibration.result.get("cells") or [])):
            svgs[f"calibration-reliability-{index:03d}.svg"] = reverse(
                "reports-calibration-reliability",
                kwargs={"slug": slug, "snapshot_id": calibration.pk}) + f"?cell={index}"
    for name, url in pages.items():
        status, text = _get(client, url)
        out[name] = f"status {status}\n" + normalise(text)
    for name, url in svgs.items():
        status, text = _get(client, url)
        out[name] = f"status {status}\n" + svg_normalise(text)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=study.owner)}")
    status, text = _get(api, reverse("calibration-api-export", kwargs={"slug": slug})
                        + f"?format=csv&snapshot={calibration.pk}")
    out["calibrated-scores.csv"] = f"status {status}\n" + normalise(text)
    # The agreement snapshot comes last, so that the ids and pages above are those recorded
    # before it was added to the comparison.
    out.update(agreement_artefacts(study, client, api))
    return out


def agreement_artefacts(study: Study, client: Client, api: Client) -> dict[str, str]:
    """Every output of an agreement snapshot of `study`: the result JSON, the audit page, its
    heat maps and bias chart, the first disagreements page, every CSV table of the export, and
    the list of the study's reports of every kind."""
    from reports.agreement.present.export import TABLES

    snap = snapshot_compute(study, "agreement", dict(AGREEMENT_PARAMS))
    out = {"agreement.json": json.dumps(
        {"status": snap.status, "error": snap.error, "params": snap.params,
         "result_version": snap.result_version, "input_fingerprint": snap.input_fingerprint,
         "result": snap.result}, indent=1, sort_keys=True) + "\n"}
    slug, ids = study.slug, {"slug": study.slug, "report_id": snap.pk}
    pages: dict[str, str] = {
        "reports-list.html": reverse("reports-list", kwargs={"slug": slug}),
        "agreement-audit.html": reverse("reports-audit", kwargs=ids),
    }
    svgs = {"agreement-bias.svg": reverse("reports-bias", kwargs=ids)}
    result = snap.result if isinstance(snap.result, dict) else {}
    for crit in result.get("criteria") or []:
        svgs[f"agreement-heatmap-{crit['id']}.svg"] = (reverse("reports-heatmap", kwargs=ids)
                                                       + f"?criterion={crit['id']}")
    for entry in (result.get("disagreements") or [])[:1]:
        pages["agreement-disagreements.html"] = (
            reverse("reports-disagreements", kwargs=ids)
            + f"?judge={entry['judge_version']}&criterion={entry['criterion']}")
    for table in TABLES:
        pages[f"agreement-{table}.csv"] = (reverse("reports-api-export", kwargs=ids)
                                           + f"?table={table}")
    for name, url in pages.items():
        status, text = _get(api if name.endswith(".csv") else client, url)
        out[name] = f"status {status}\n" + normalise(text)
    for name, url in svgs.items():
        status, text = _get(client, url)
        out[name] = f"status {status}\n" + svg_normalise(text)
    return out


# --- the studies -------------------------------------------------------------------------------


def demo_study() -> Study:
    """The SIMULATED demo study as `manage.py demo_seed` builds it (its own fixed seeds)."""
    from demo import demo_data

    call_command("demo_seed", "--items", "200", verbosity=0, stdout=_Null())
    study = Study.objects.get(slug=demo_data.DEMO_SLUG)
    # The seed's own snapshots are queued for a worker; whether one has run them by the time
    # the pages are fetched depends on the environment (none listens in CI's test broker), so
    # they are computed here, as a worker would, for the list pages to be the same everywhere.
    for pending in ReportSnapshot.objects.filter(study=study).exclude(
            status=ReportSnapshot.Status.DONE).order_by("id"):
        report_compute(report_id=pending.pk)
    return study


def dataset_study(slug: str, name: str) -> Study:
    from imports.datasets import dataset_import
    from studies.models import Membership
    from tests.reports.conftest import shared_data_dir

    owner = get_user_model().objects.create(username=f"{slug}-lead")
    study = Study.objects.create(slug=slug, name=slug, owner=owner, status=Study.Status.OPEN)
    Membership.objects.create(study=study, user=owner, role=Membership.Role.LEAD)
    dataset_import(study=study, name=name, data_dir=shared_data_dir())
    return study


def hanna_study() -> Study:
    """HANNA with the pass threshold a lead sets before importing (3 of 5)."""
    from imports.datasets import dataset_import
    from imports.generic import scale_parse
    from studies.services import rubric_update, study_create
    from tests.reports.conftest import shared_data_dir

    owner = get_user_model().objects.create(username="golden-hanna-lead")
    study = study_create(owner=owner, fields={"slug": "golden-hanna", "name": "HANNA",
                                              "status": "open"})
    criteria = [{**scale_parse("ordinal:1-5").criterion_fields(key), "pass_threshold": 3}
                for key in ("relevance", "coherence", "empathy", "surprise", "engagement",
                            "complexity")]
    rubric_update(study=study, criteria=criteria, created_by=owner)
    dataset_import(study=study, name="hanna", data_dir=shared_data_dir())
    return study


class _Null:
    def write(self, *_: Any) -> None:
        return None

    def flush(self) -> None:
        return None


CASES: dict[str, Callable[[], Study]] = {
    "demo": demo_study,
    "pandalm": lambda: dataset_study("golden-pandalm", "pandalm"),
    "hanna": hanna_study,
    "judge-bench-newsroom": lambda: dataset_study("golden-newsroom", "judge-bench:newsroom"),
}
