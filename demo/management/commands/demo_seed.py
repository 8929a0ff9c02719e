"""`python manage.py demo_seed`: load the SIMULATED demo study (used by `python3 dev.py demo`).

It goes through the same paths a real team uses — `import_study` for the study file and
`import_outputs` for items, candidates and outputs — and then adds simulated judge verdicts and
simulated annotator labels (clearly named as such), a sampling plan so that the demo annotator
login has work, an agreement report and a selection report. The simulated data are drawn so
that the selection report shows a ranking flip (atlas best on the 70/30 English/German mix,
borealis clearly better in German) and a gate failure (cirrus's p95 latency above the plan's
4 s budget); see demo/demo_data.py. Re-running it leaves an existing demo study alone unless
`--reset` is given.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from annotations.imports_service import annotation_import_clean, annotations_import_bulk
from annotations.models import Annotation, SamplingPlan
from annotations.services import sampling_plan_create
from annotations.services.labels import CleanLabel
from demo import demo_data as dd
from judges.models import JudgeJob, JudgeRun, Verdict
from judges.services import (
    VerdictImport,
    judge_imported_version_get_or_create,
    verdicts_import_bulk,
)
from reports.services import report_build
from snapshots.models import ReportSnapshot
from studies.models import Membership, Output, Study
from studies.services import membership_set

LOGINS = {"lead": "demo-lead-pass", "annotator": "demo-annotator-pass",
          "annotator2": "demo-annotator2-pass"}
SIM_ANNOTATORS = ["sim-annotator-1", "sim-annotator-2", "sim-annotator-3"]
SIM_JUDGE = "sim-judge (simulated)"


def study_spec() -> dict[str, Any]:
    return {
        "study": {
            "slug": dd.DEMO_SLUG,
            "name": "Support answers EN/DE (simulated demo)",
            "owner": "lead",
            "status": "open",
            "is_simulated": True,
            "task_description": (
                "SIMULATED DATA. Answer customer questions about product manuals using the "
                "retrieved manual section. Three simulated candidates; which one to ship?"
            ),
            "deployment_context": "Customer-facing help widget, 70% English / 30% German; "
                                  "95% of answers within 4 seconds.",
            "run_conditions": {
                "prompt_template": "Answer using only this manual section:\n{context}\n\n"
                                   "Question: {input}",
                "parameters": {"temperature": 0.2, "max_tokens": 300},
            },
            "show_reference": False,
        },
        "rubric": {
            "notes": "Demo rubric (simulated study).",
            "criteria": [
                {"key": "correct", "name": "Correct and grounded", "scale": "binary",
                 "guidance": "Does the answer state what the manual section says, with no "
                             "invented facts?"},
                {"key": "helpful", "name": "Helpfulness", "scale": "ordinal",
                 "guidance": "How well does the answer help the customer act?",
                 "points": [
                     {"value": 1, "label": "Useless"}, {"value": 2, "label": "Poor"},
                     {"value": 3, "label": "Acceptable"}, {"value": 4, "label": "Good"},
                     {"value": 5, "label": "Excellent"}],
                 "pass_threshold": 4},
            ],
        },
        "strata": [
            {"key": "language", "name": "Language", "kind": "categorical",
             "source": "metadata.language", "config": {"values": ["en", "de"], "other": "other"}},
            {"key": "length", "name": "Document length", "kind": "numeric_bins",
             "source": "context_length",
             "config": {"edges": [0, 800], "labels": ["short", "long"]}},
            {"key": "noise", "name": "Input noise", "kind": "boolean",
             "source": "metadata.noisy", "config": {"true_label": "noisy", "false_label": "clean"}},
        ],
        "plan": {
            "notes": "Pre-registered for the simulated demo.",
            "lock": True,
            "spec": {
                # A floor on the mix: a candidate below it is out whatever else it does.
                "criteria": {"correct": {"metric": "pass_rate", "threshold": 0.5,
                                         "every_stratum": False, "primary": True}},
                "strata": ["language", "length", "noise"],
                "min_human_labels_per_stratum": 30,
                "deployment_mix": {"language": {"en": 0.7, "de": 0.3}},
                "confidence_level": 0.95,
                # The selection rule: rubric pass rate decides, 3 points count as a real
                # difference, and no candidate ships past the latency budget or an error
                # rate above 5%.
                "primary_metric": "rubric_pass_rate",
                "margin": 0.03,
                "gates": {"latency_p95_ms": 4000, "error_rate": 0.05},
            },
        },
        "members": [{"username": "annotator", "role": "annotator"},
                    {"username": "annotator2", "role": "annotator"}],
    }


class Command(BaseCommand):
    help = "Load the simulated demo study (idempotent; --reset rebuilds it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reset", action="store_true", help="delete and rebuild the demo")
        # 400 items give the simulated flip and the mix margin intervals that exclude zero.
        parser.add_argument("--items", type=int, default=400)

    def handle(self, *args: Any, **options: Any) -> None:
        self._users()
        existing = Study.objects.filter(slug=dd.DEMO_SLUG).first()
        if existing is not None and not options["reset"]:
            self.stdout.write(f"demo study '{dd.DEMO_SLUG}' already present (use --reset)")
        else:
            if existing is not None:
                self._delete(existing)
            self._build(options["items"])
        self.stdout.write(self.style.SUCCESS("Demo logins (SIMULATED study):"))
        for name, password in LOGINS.items():
            self.stdout.write(f"  {name:<11} password: {password}")

    def _users(self) -> None:
        User = get_user_model()
        for name, password in LOGINS.items():
            user, created = User.objects.get_or_create(username=name)
            if created or not user.check_password(password):
                user.set_password(password)
                user.is_staff = name == "lead"
                user.save()

    def _delete(self, study: Any) -> None:
        with transaction.atomic():
            # Verdicts and annotations protect their criteria, sampling plans their rubric
            # version and report snapshots their analysis plan; remove them first.
            Annotation.objects.filter(criterion__rubric__study=study).delete()
            SamplingPlan.objects.filter(study=study).delete()
            Verdict.objects.filter(criterion__rubric__study=study).delete()
            JudgeJob.objects.filter(run__study=study).delete()
            JudgeRun.objects.filter(study=study).delete()
            ReportSnapshot.objects.filter(study=study).delete()
            study.delete()

    def _build(self, n_items: int) -> None:
        folder = Path(settings.VAR_DIR) / "demo"
        folder.mkdir(parents=True, exist_ok=True)
        items = dd.demo_items(n_items)
        outputs = dd.demo_outputs(items)
        spec_path = folder / "study.yaml"
        spec_path.write_text(yaml.safe_dump(study_spec(), sort_keys=False, allow_unicode=True))
        self._write_jsonl(folder / "items.jsonl", (
            {"external_id": it.external_id, "input": it.question, "context": it.document,
             "reference": it.fact,
             "metadata": {"language": it.language, "noisy": it.noisy, "simulated": True}}
            for it in items))
        self._write_jsonl(folder / "candidates.jsonl", (
            {"name": name, "provider": meta[0], "model_id": meta[1], "model_family": meta[2],
             "notes": "Simulated candidate: outputs drawn from per-stratum pass rates.",
             "public_scores": dd.PUBLIC_SCORES[name]}
            for name, meta in dd.CANDIDATE_META.items()))
        self._write_jsonl(folder / "outputs.jsonl", (
            {"item": o.item.external_id, "candidate": o.candidate, "text": o.text,
             "latency_ms": o.latency_ms, "tokens_in": o.tokens_in, "tokens_out": o.tokens_out,
             "cost": o.cost, "error": o.error,
             "finish_reason": "error" if o.error else "stop"}
            for o in outputs))
        quiet = {"verbosity": 0}
        call_command("import_study", str(spec_path), **quiet)
        for kind in ("items", "candidates", "outputs"):
            call_command("import_outputs", str(folder / f"{kind}.jsonl"), study=dd.DEMO_SLUG,
                         kind=kind, no_progress=True, **quiet)
        self._simulated_ratings(outputs)
        self._sampling_plan()
        self._report()
        self.stdout.write(self.style.SUCCESS(
            f"demo study '{dd.DEMO_SLUG}': {len(items)} items, {len(outputs)} outputs "
            "(all simulated)"))

    @staticmethod
    def _write_jsonl(path: Path, rows: Any) -> None:
        with path.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    def _simulated_ratings(self, outputs: list[dd.DemoOutput]) -> None:
        """Simulated judge verdicts on every output, simulated humans on a subset.

        Written through the owning apps' import services, so the simulated labels obey the
        same rules (values, severity only on failures) as real ones.
        """
        study = Study.objects.get(slug=dd.DEMO_SLUG)
        rubric = study.rubric_versions.order_by("-version").first()
        assert rubric is not None
        crit = {c.key: c for c in rubric.criteria.all()}
        by_key = {
            (ext, name): oid
            for oid, ext, name in Output.objects.filter(study=study)
            .values_list("id", "item__external_id", "candidate__name")
        }
        rng = random.Random(23)
        version = judge_imported_version_get_or_create(
            study=study, name=SIM_JUDGE, label="simulated", value_type="label",
            model_family="simulated",
            # The judge config records the simulation (judges.config: `simulated`): the
            # reports stamp it from the version's flag, never from the name.
            # (The source text is kept as first recorded, from before the demo had its own app,
            # so the simulated judge's stored config is unchanged.)
            config={"source": "demo seed (imports.demo_data)", "simulated": True},
            description="Simulated judge: agrees with the simulated truth 94% of the time "
                        "in English and 68% in German.",
        ).version
        verdicts: dict[tuple[int, int, str, int], VerdictImport] = {}
        for o in outputs:
            oid = by_key[(o.item.external_id, o.candidate)]
            label = dd.simulated_judge_label(o, rng)
            verdicts[(version.pk, crit["correct"].pk, "output", oid)] = VerdictImport(
                criterion=crit["correct"], orders={"": label})
            noise = 0 if o.item.language == "en" else rng.choice([-2, -1, 1, 2])
            helpful = max(1, min(5, o.helpfulness + noise))
            verdicts[(version.pk, crit["helpful"].pk, "output", oid)] = VerdictImport(
                criterion=crit["helpful"], orders={"": str(helpful)})
        verdicts_import_bulk(verdicts=verdicts, rationale="(simulated judge)")

        User = get_user_model()
        annotators = []
        for name in SIM_ANNOTATORS:
            user, _ = User.objects.get_or_create(username=name, defaults={"is_active": False})
            user.set_unusable_password()
            user.save()
            membership_set(study=study, user=user, role=Membership.Role.ANNOTATOR)
            annotators.append(user)
        users = {u.username: u for u in annotators}
        labelled_items = {it.external_id for it in dd.demo_items(len(outputs) // 3)[::2]}
        labels: dict[tuple[int, int, str, int], CleanLabel] = {}
        for o in outputs:
            if o.item.external_id not in labelled_items:
                continue
            oid = by_key[(o.item.external_id, o.candidate)]
            for name, label, helpful, severity in dd.simulated_annotator_labels(
                o, SIM_ANNOTATORS, rng
            ):
                uid = users[name].pk
                labels[(uid, crit["correct"].pk, "output", oid)] = annotation_import_clean(
                    criterion=crit["correct"], value=label, severity=severity)
                labels[(uid, crit["helpful"].pk, "output", oid)] = annotation_import_clean(
                    criterion=crit["helpful"], value=str(helpful),
                    severity=(rng.choice([2, 3]) if helpful < 4 else None))
        annotations_import_bulk(labels=labels, rationale="(simulated annotator)")

    def _sampling_plan(self) -> None:
        study = Study.objects.get(slug=dd.DEMO_SLUG)
        lead = get_user_model().objects.get(username="lead")
        sampling_plan_create(
            study=study,
            spec={"mode": "per_stratum", "dimension": "language", "n": 30, "seed": 5},
            k=2, gold_rate=0.0, created_by=lead,
        )

    def _report(self) -> None:
        study = Study.objects.get(slug=dd.DEMO_SLUG)
        lead = get_user_model().objects.get(username="lead")
        plan = study.plans.order_by("-version").first()
        report_build(study=study, params={"seed": 1, "n_resamples": 500}, plan=plan,
                     created_by=lead)
        # The selection report takes its rule (mix, gates, margin) from the locked plan.
        report_build(study=study, kind="selection", params={"seed": 1}, plan=plan,
                     created_by=lead)
