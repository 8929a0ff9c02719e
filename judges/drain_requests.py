"""Building a drain's provider requests from claimed jobs (no network, no writes).

`DrainContext` holds what is the same for every job of a drain; `prepare_call` turns one claimed
job into the `PreparedCall` the call loop sends. Per criterion, the first job's request is
built in full (`prompts.provider_request_for`: allow-lists, key, schema, parameters) and kept
as a template; every later job's body is the template's encoded bytes with the subject's
rendered texts spliced in (`DrainContext.spliced`, `WireTemplate.prompt_body`): byte for byte
the body the full path gives (tests/judges/test_request_splice.py compares them), without a
`SubjectContext`, a `ProviderRequest` or a JSON encoding of the whole request per job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from django.db import connection

from studies.models import Comparison, Criterion, Item, Output

from .calls import PreparedCall
from .config import JudgeNetworkPolicy
from .models import Judge, JudgeRun, JudgeVersion
from .prompts import (
    PromptRenderer,
    RenderPlan,
    provider_request_for,
    subject_context_for,
    subject_of,
)
from .prompts import untrusted_values as _untrusted
from .providers import PreparedCall as WirePreparedCall
from .providers import ProviderRequest, WireTemplate
from .ratelimit import ProviderLimits, estimate_tokens, limits_for
from .runs import ClaimedJob


class _Splice(NamedTuple):
    """A criterion's request template, ready for splicing one subject's texts into."""

    plan: RenderPlan
    request: ProviderRequest  # the template without messages
    wire: WireTemplate
    limit: tuple[str, ProviderLimits] | None
    seeded: bool

def allowed_values_for(criterion: Any) -> list[str]:
    """The values a verdict on this criterion may take (see judges/models.py)."""
    scale = criterion.scale
    if scale == "binary":
        return ["pass", "fail"]
    if scale == "pairwise":
        return ["A", "B", "tie"]
    return [str(p.get("value")) for p in (criterion.points or []) if isinstance(p, dict)]


# Read-only stand-ins for the rows `prompts.subject_context_for` reads: loaded as plain values
# (with the claim, or one query per claimed chunk) instead of as model instances per job.
# Named tuples: a few of them per job, and they are the cheapest objects to build.
class _ItemView(NamedTuple):
    input: str
    context: str
    reference: str


class _StudyView(NamedTuple):
    run_conditions: Any


class _OutputView(NamedTuple):
    pk: int
    text: str
    item: _ItemView
    study: _StudyView


class _ComparisonView(NamedTuple):
    pk: int
    item: _ItemView
    study: _StudyView
    output_a: _OutputView
    output_b: _OutputView


class DrainContext:
    """What is the same for every job of a drain, loaded or built once rather than per job:
    the judge version and its config, the run's criteria, the study's run conditions, and per
    criterion the provider request minus its messages (only the prompt differs per subject).

    Read when the drain starts: an edit to the study's run conditions reaches the prompts of
    the next drain (a time slice at most), not of calls already being claimed.
    """

    def __init__(self, run: JudgeRun) -> None:
        self.version: JudgeVersion = run.judge_version
        self.config: Mapping[str, Any] = self.version.config
        self.is_llm = self.version.judge.kind == Judge.Kind.LLM
        # Samples per subject and criterion (judge_run_start validated it); one sample means
        # a single-output subject has exactly one job.
        self.samples = self.config.get("samples", 1) if self.is_llm else 1
        self.study = _StudyView(run_conditions=run.study.run_conditions)
        self.criteria: dict[int, Criterion] = {c.pk: c for c in run.criteria.all()}
        self.allowed: dict[int, list[str]] = {}
        self._templates: dict[int, ProviderRequest] = {}
        self._template_fields: dict[int, dict[str, Any]] = {}
        self._wires: dict[int, WireTemplate] = {}
        self._limits: dict[tuple[str, str], tuple[str, ProviderLimits] | None] = {}
        self._renderer: PromptRenderer | None = None
        self._trusted: dict[int, tuple[str, Mapping[str, str]]] = {}
        self._splices: dict[int, _Splice] = {}
        # What a provider says on error reaches leads (job errors, raw excerpts) only from a
        # base URL the operator listed; an endpoint admitted as a private-network host could be
        # any local service (see judges/config.py).
        self.show_error_bodies = bool(self.is_llm and JudgeNetworkPolicy.from_settings()
                                      .base_url_listed(str(self.config.get("base_url", ""))))

    def criterion(self, crit_id: int) -> Criterion:
        crit = self.criteria.get(crit_id)
        if crit is None:  # not one of the run's criteria (should not happen); load it anyway
            crit = self.criteria[crit_id] = Criterion.objects.get(pk=crit_id)
        return crit

    def allowed_values(self, crit_id: int) -> list[str]:
        values = self.allowed.get(crit_id)
        if values is None:
            values = self.allowed[crit_id] = allowed_values_for(self.criterion(crit_id))
        return values

    def request_for(self, crit_id: int, ctx: Any) -> ProviderRequest:
        """`prompts.provider_request_for(config, ctx)`, built in full once per criterion.

        Everything in the request but the messages depends on the config and the criterion
        only (allow-list check, API key, JSON schema, parameters); the messages are rendered
        for each subject. A failure (key unset, URL refused) is not cached: every job then
        fails with the reason, as it would have on its own.
        """
        template = self._templates.get(crit_id)
        if template is None:
            template = self._templates[crit_id] = provider_request_for(config=self.config,
                                                                       ctx=ctx)
            if self._renderer is None:
                self._renderer = PromptRenderer(self.config)
            self._trusted[crit_id] = (ctx.criterion_scale, self._renderer.trusted_values(ctx))
            self._template_fields[crit_id] = {
                f.name: getattr(template, f.name) for f in dataclasses.fields(template)
                if f.name != "messages"
            }
            return template
        # The constructor with the template's other fields (what dataclasses.replace does,
        # without looking the fields up again for every job).
        renderer = self._renderer
        assert renderer is not None  # made with the first template
        return ProviderRequest(**self._template_fields[crit_id], messages=renderer.render(ctx))

    def wire_for(self, crit_id: int, request: ProviderRequest) -> tuple[WirePreparedCall, bytes]:
        """The HTTP form of a request `request_for(crit_id, …)` built (its template with the
        subject's messages), without encoding the template's fields again."""
        wire = self._wires.get(crit_id)
        if wire is None:
            wire = self._wires[crit_id] = WireTemplate(self._templates[crit_id])
        return wire.wire(request)

    def spliced(self, job: ClaimedJob, output: Any, comparison: Any) -> PreparedCall | None:
        """The job's call from its criterion's template (None until the criterion's first
        request was built in full, for a sample whose seed is offset, or for a text the
        template cannot take: `prepare_call` then builds it in full)."""
        splice = self._splices.get(job.criterion_id)
        if splice is None:
            splice = self._splice_make(job.criterion_id)
            if splice is None:
                return None
        if splice.seeded and job.sample_index:
            return None
        item, _study, out_text, a_text, b_text, key = subject_of(
            output=output, comparison=comparison, order=job.order)
        system, user = splice.plan.render(
            key, _untrusted(item.input, item.context, item.reference, out_text, a_text, b_text))
        body = splice.wire.prompt_body(system, user)
        if body is None:
            return None
        return PreparedCall(job_id=job.pk, request=splice.request, limit=splice.limit,
                            est_tokens=estimate_tokens(prompt_chars=len(system) + len(user),
                                                       max_tokens=splice.request.max_tokens),
                            wire=(splice.wire.call, body))

    def _splice_make(self, crit_id: int) -> _Splice | None:
        template = self._templates.get(crit_id)
        if template is None:
            return None
        wire = self._wires.get(crit_id)
        if wire is None:
            wire = self._wires[crit_id] = WireTemplate(template)
        scale, trusted = self._trusted[crit_id]
        assert self._renderer is not None  # made with the first template
        request = dataclasses.replace(template, messages=())
        splice = self._splices[crit_id] = _Splice(
            plan=RenderPlan(self._renderer, scale, trusted), request=request, wire=wire,
            limit=self.limit_for(request), seeded=request.seed is not None)
        return splice

    def limit_for(self, request: ProviderRequest) -> tuple[str, ProviderLimits] | None:
        key = (request.base_url, request.model)
        if key not in self._limits:
            self._limits[key] = limits_for(base_url=request.base_url, model=request.model)
        return self._limits[key]


_SUBJECTS_SQL = """
SELECT o.id, NULL, o.text, NULL, NULL, NULL, NULL, i.input, i.context, i.reference
FROM {output} o JOIN {item} i ON i.id = o.item_id WHERE o.id = ANY(%s)
UNION ALL
SELECT NULL, c.id, NULL, c.output_a_id, a.text, c.output_b_id, b.text, i.input,
    i.context, i.reference
FROM {comparison} c JOIN {item} i ON i.id = c.item_id
    JOIN {output} a ON a.id = c.output_a_id JOIN {output} b ON b.id = c.output_b_id
WHERE c.id = ANY(%s)
"""


def subject_views(
    jobs: Sequence[ClaimedJob], study: _StudyView
) -> tuple[dict[int, _OutputView], dict[int, _ComparisonView]]:
    """The outputs and comparisons (with their items) of a claimed chunk: from the texts the
    claim returned (PostgreSQL), else loaded in one query."""
    outputs: dict[int, _OutputView] = {}
    comparisons: dict[int, _ComparisonView] = {}
    rows: list[tuple[Any, ...]] = []
    missing = []
    for j in jobs:
        t = j.texts
        if t is None:
            missing.append(j)
        else:
            rows.append((j.output_id, j.comparison_id, t.output_text, t.output_a_id,
                         t.output_a_text, t.output_b_id, t.output_b_text, t.item_input,
                         t.item_context, t.item_reference))
    if missing:
        rows += _subject_rows(missing)
    for oid, cid, text, a_id, a_text, b_id, b_text, inp, context, reference in rows:
        item = _ItemView(inp, context, reference)
        if oid is not None:
            outputs[oid] = _OutputView(oid, text, item, study)
        else:
            comparisons[cid] = _ComparisonView(cid, item, study,
                                               _OutputView(a_id, a_text, item, study),
                                               _OutputView(b_id, b_text, item, study))
    return outputs, comparisons


def _subject_rows(jobs: Sequence[ClaimedJob]) -> list[tuple[Any, ...]]:
    out_ids = [j.output_id for j in jobs if j.output_id is not None]
    cmp_ids = [j.comparison_id for j in jobs if j.comparison_id is not None]
    if connection.vendor == "postgresql":
        # Raw SQL: compiling these two ORM queries cost more CPU than running them.
        sql = _SUBJECTS_SQL.format(output=Output._meta.db_table, item=Item._meta.db_table,
                                   comparison=Comparison._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(sql, [out_ids, cmp_ids])
            return list(cursor.fetchall())
    rows: list[tuple[Any, ...]] = [
        (oid, None, text, None, None, None, None, inp, ctx, ref)
        for oid, text, inp, ctx, ref in Output.objects.filter(id__in=out_ids).values_list(
            "id", "text", "item__input", "item__context", "item__reference")]
    rows += [(None, cid, None, *rest) for cid, *rest in Comparison.objects.filter(
        id__in=cmp_ids).values_list(
        "id", "output_a_id", "output_a__text", "output_b_id", "output_b__text",
        "item__input", "item__context", "item__reference")]
    return rows


def prepare_call(
    job: ClaimedJob, dctx: DrainContext, outputs: Mapping[int, _OutputView],
    comparisons: Mapping[int, _ComparisonView],
) -> PreparedCall:
    criterion = dctx.criterion(job.criterion_id)
    output = comparison = None
    if job.output_id is not None:
        output = outputs.get(job.output_id)
        if output is None:
            raise LookupError(f"output {job.output_id} no longer exists")
    else:
        assert job.comparison_id is not None
        comparison = comparisons.get(job.comparison_id)
        if comparison is None:
            raise LookupError(f"comparison {job.comparison_id} no longer exists")
    spliced = dctx.spliced(job, output, comparison)
    if spliced is not None:
        return spliced
    ctx = subject_context_for(criterion=criterion, output=output, comparison=comparison,
                              order=job.order)
    request = dctx.request_for(job.criterion_id, ctx)
    wire = None
    if job.sample_index and request.seed is not None:
        # Identical seeds would make every sample the same answer; offset them per sample.
        request = dataclasses.replace(request, seed=request.seed + job.sample_index)
    else:
        wire = dctx.wire_for(job.criterion_id, request)
    prompt_chars = sum(len(m.content) for m in request.messages)
    return PreparedCall(job_id=job.pk, request=request, limit=dctx.limit_for(request),
                        est_tokens=estimate_tokens(prompt_chars=prompt_chars,
                                                   max_tokens=request.max_tokens), wire=wire)
