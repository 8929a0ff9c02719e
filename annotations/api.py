"""REST views for annotation: thin (validate → service/selector → serialize).

Every view resolves the study through `studies.access.api_study`, so a caller without
access gets 404. Annotator views return only the caller's own work and the blind grading
context; lead views (min_role lead) may name candidates (export only).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from reviewhub.api.pagination import PAGE_PARAMETERS, DefaultCursorPagination, paginated
from reviewhub.errors import Forbidden, NotFound, ValidationFailed
from studies.access import api_study
from studies.models import Comparison, Criterion, Membership, Output, Study

from . import export, selectors, services
from .assignment_lookup import own_assignment
from .models import Adjudication, GoldLabel, Invitation, SamplingPlan
from .serializers import (
    AdjudicationSerializer,
    AnnotatorStatsRowSerializer,
    DisagreementRowSerializer,
    GoldLabelSerializer,
    GradingContextSerializer,
    HeartbeatResponseSerializer,
    InvitationSerializer,
    InviteRequestSerializer,
    InviteResponseSerializer,
    MyAnnotationSerializer,
    NextResponseSerializer,
    PasswordResetResponseSerializer,
    ProgressResponseSerializer,
    ProgressSerializer,
    ReviseRequestSerializer,
    SamplingPlanCreateSerializer,
    SamplingPlanSerializer,
    StratumQueueRowSerializer,
    SubjectLabelRequestSerializer,
    SubmitRequestSerializer,
    SubmitResponseSerializer,
)

TAG_ANNOTATE = ["annotation (annotators)"]
TAG_LEAD = ["annotation (leads)"]
ERRORS = {
    400: OpenApiResponse(description="Validation failed; details.errors[].path names the field."),
    404: OpenApiResponse(description="Study, assignment or annotation not found for you."),
    409: OpenApiResponse(description="Conflict (already submitted, lease expired, ...)."),
}


def _user(request: Request) -> User:
    # IsAuthenticated (the default permission) guarantees a real user here.
    return cast(User, request.user)




def _annotator_study(request: Request, slug: str, *, write: bool = True) -> Study:
    return api_study(request, slug, write=write, min_role=Membership.Role.ANNOTATOR).study


def _lead_study(request: Request, slug: str, *, write: bool = False) -> Study:
    return api_study(request, slug, write=write, min_role=Membership.Role.LEAD).study


def _require_write(request: Request) -> None:
    """Answering an invitation changes the account's access: a token must be read-write and
    for the whole account (a token limited to one study cannot join another)."""
    token = request.auth
    if token is not None and (not getattr(token, "can_write", False)
                              or getattr(token, "study_id", None) is not None):
        raise Forbidden("Answering an invitation needs a read-write token for the whole "
                        "account (or a signed-in session).")


def _validated(serializer_class: type, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# --- annotators ---------------------------------------------------------------------------------


class QueueNextView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=None,
        responses={200: NextResponseSerializer, **ERRORS},
        summary="Lease the next output (or comparison) for the calling annotator",
        description="Returns the caller's live lease if they hold one, else resumes their own "
        "expired lease if the output still has room, else leases a new output they were never "
        "given. `assignment` is null when nothing is left for them. The payload is blind.",
    )
    def post(self, request: Request, slug: str) -> Response:
        study = _annotator_study(request, slug)
        assignment = services.assignment_next(study=study, annotator=_user(request))
        # The context loads the entry and its plan onto the assignment; progress reuses it.
        context = (
            selectors.grading_context(assignment=assignment) if assignment is not None else None
        )
        progress = selectors.annotator_progress(
            study=study,
            annotator=_user(request),
            plan=assignment.entry.plan if assignment is not None else None,
        )
        body = {
            "assignment": context.as_dict() if context is not None else None,
            "progress": progress.as_dict(),
        }
        return Response(body)


class AssignmentDetailView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        responses={200: GradingContextSerializer, **ERRORS},
        summary="The blind grading context of one of your assignments",
    )
    def get(self, request: Request, slug: str, assignment_id: int) -> Response:
        study = _annotator_study(request, slug, write=False)
        assignment = own_assignment(study, _user(request), assignment_id, missing=NotFound)
        return Response(selectors.grading_context(assignment=assignment).as_dict())


class AssignmentHeartbeatView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=None,
        responses={200: HeartbeatResponseSerializer, **ERRORS},
        summary="Extend the lease while working",
    )
    def post(self, request: Request, slug: str, assignment_id: int) -> Response:
        study = _annotator_study(request, slug)
        assignment = own_assignment(study, _user(request), assignment_id, missing=NotFound)
        assignment = services.assignment_heartbeat(assignment=assignment, annotator=_user(request))
        return Response(
            {
                "assignment_id": assignment.pk,
                "status": assignment.status,
                "lease_expires_at": assignment.lease_expires_at,
            }
        )


class AssignmentSubmitView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=SubmitRequestSerializer,
        responses={200: SubmitResponseSerializer, **ERRORS},
        summary="Submit labels for every criterion (idempotent on submission_id)",
        description="A repeat with the same submission_id returns the same annotations. A "
        "different submission for an assignment already submitted is 409 `already_submitted`."
        " Severity 1..5 is required exactly for failing labels.",
    )
    def post(self, request: Request, slug: str, assignment_id: int) -> Response:
        study = _annotator_study(request, slug)
        assignment = own_assignment(study, _user(request), assignment_id, missing=NotFound)
        data = _validated(SubmitRequestSerializer, request.data)
        annotations = services.annotation_submit(
            assignment=assignment,
            annotator=_user(request),
            submission_id=data["submission_id"],
            labels=data["labels"],
            rationale=data["rationale"],
            flags=data["flags"],
            time_on_task_ms=data["time_on_task_ms"],
            source="api",
        )
        progress = selectors.annotator_progress(
            study=study,
            annotator=_user(request),
            plan=annotations[0].plan if annotations and annotations[0].plan else None,
        )
        return Response(
            {
                "annotations": MyAnnotationSerializer(annotations, many=True).data,
                "progress": progress.as_dict(),
            }
        )


class AssignmentSkipView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=None,
        responses={200: ProgressSerializer, **ERRORS},
        summary="Skip: give the output back (you will not be offered it again)",
    )
    def post(self, request: Request, slug: str, assignment_id: int) -> Response:
        study = _annotator_study(request, slug)
        assignment = own_assignment(study, _user(request), assignment_id, missing=NotFound)
        services.assignment_skip(assignment=assignment, annotator=_user(request))
        progress = selectors.annotator_progress(study=study, annotator=_user(request))
        return Response(progress.as_dict())


class MyAnnotationsView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        parameters=[
            OpenApiParameter("revisable", OpenApiTypes.BOOL, description="Only revisable ones"),
            *PAGE_PARAMETERS,
        ],
        responses={200: paginated(MyAnnotationSerializer), **ERRORS},
        summary="Your own annotations in this study (cursor-paginated, newest first)",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _annotator_study(request, slug, write=False)
        revisable = request.query_params.get("revisable", "").lower() in ("1", "true", "yes")
        qs = selectors.my_annotations(
            study=study, annotator=_user(request), revisable_only=revisable
        )
        paginator = DefaultCursorPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(MyAnnotationSerializer(page, many=True).data)


class MyAnnotationDetailView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=ReviseRequestSerializer,
        responses={200: MyAnnotationSerializer, **ERRORS},
        summary="Revise your annotation within the revision window (history kept)",
    )
    def patch(self, request: Request, slug: str, annotation_id: int) -> Response:
        study = _annotator_study(request, slug)
        # Someone else's annotation is a 404 before the body is looked at (no 400 first).
        if (
            not selectors.my_annotations(study=study, annotator=_user(request))
            .filter(pk=annotation_id)
            .exists()
        ):
            raise NotFound("Annotation not found.")
        data = _validated(ReviseRequestSerializer, request.data)
        annotation = services.annotation_revise(
            annotation_id=annotation_id,
            annotator=_user(request),
            value=data["value"],
            severity=data["severity"],
            severity_note=data["severity_note"],
            rationale=data["rationale"],
            flags=data["flags"],
        )
        annotation = selectors.my_annotations(study=study, annotator=_user(request)).get(
            pk=annotation.pk
        )
        return Response(MyAnnotationSerializer(annotation).data)


# --- leads --------------------------------------------------------------------------------------


class SamplingPlanListView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        responses={200: SamplingPlanSerializer(many=True), **ERRORS},
        summary="Sampling plan versions, newest first",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug)
        plans = SamplingPlan.objects.filter(study=study).select_related("rubric", "created_by")
        return Response(SamplingPlanSerializer(plans.order_by("-version"), many=True).data)

    @extend_schema(
        tags=TAG_LEAD,
        request=SamplingPlanCreateSerializer,
        responses={201: SamplingPlanSerializer, **ERRORS},
        summary="Create a new plan version (supersedes the active one) and fill its queue",
    )
    def post(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug, write=True)
        data = _validated(SamplingPlanCreateSerializer, request.data)
        plan = services.sampling_plan_create(
            study=study,
            spec=data["spec"],
            k=data["k"],
            gold_rate=data["gold_rate"],
            created_by=_user(request),
        )
        plan = SamplingPlan.objects.select_related("rubric", "created_by").get(pk=plan.pk)
        return Response(SamplingPlanSerializer(plan).data, status=status.HTTP_201_CREATED)


class SamplingPlanDetailView(APIView):
    def _plan(self, request: Request, slug: str, version: int, *, write: bool) -> SamplingPlan:
        study = _lead_study(request, slug, write=write)
        plan = (
            SamplingPlan.objects.select_related("rubric", "created_by", "study")
            .filter(study=study, version=version)
            .first()
        )
        if plan is None:
            raise NotFound(f"Sampling plan v{version} not found.")
        return plan

    @extend_schema(
        tags=TAG_LEAD,
        responses={200: SamplingPlanSerializer, **ERRORS},
        summary="One plan version with its queue status per stratum",
    )
    def get(self, request: Request, slug: str, version: int) -> Response:
        plan = self._plan(request, slug, version, write=False)
        body = dict(SamplingPlanSerializer(plan).data)
        body["strata"] = StratumQueueRowSerializer(
            selectors.queue_status(study=plan.study, plan=plan), many=True
        ).data
        return Response(body)

    @extend_schema(
        tags=TAG_LEAD,
        request=None,
        responses={200: SamplingPlanSerializer, **ERRORS},
        summary="Deactivate a plan (its outputs stop being offered; no new version)",
    )
    def delete(self, request: Request, slug: str, version: int) -> Response:
        plan = self._plan(request, slug, version, write=True)
        plan = services.sampling_plan_deactivate(plan=plan, by=_user(request))
        return Response(SamplingPlanSerializer(plan).data)


class ProgressView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        responses={200: ProgressResponseSerializer, **ERRORS},
        summary="Queue status per stratum (needed / leased / done) and annotator statistics",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug)
        plan = services.active_plan(study)
        if plan is not None:
            plan = SamplingPlan.objects.select_related("rubric", "created_by").get(pk=plan.pk)
        return Response(
            {
                "plan": SamplingPlanSerializer(plan).data if plan else None,
                "strata": StratumQueueRowSerializer(
                    selectors.queue_status(study=study, plan=plan), many=True
                ).data
                if plan
                else [],
                "annotators": AnnotatorStatsRowSerializer(
                    selectors.annotator_stats(study=study), many=True
                ).data,
            }
        )


def _criterion_by_key(study: Study, key: str) -> Criterion:
    criterion = (
        Criterion.objects.select_related("rubric")
        .filter(rubric__study=study, key=key)
        .order_by("-rubric__version")
        .first()
    )
    if criterion is None:
        raise ValidationFailed.at("criterion", f"Unknown criterion '{key}'.")
    return criterion


class DisagreementsView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        parameters=[
            OpenApiParameter("criterion", OpenApiTypes.STR, description="Criterion key"),
            OpenApiParameter("include_judges", OpenApiTypes.BOOL, description="Default true"),
        ],
        responses={200: DisagreementRowSerializer(many=True), **ERRORS},
        summary="Outputs where annotators disagree (and, with include_judges, with judges)",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug)
        key = request.query_params.get("criterion")
        criterion = _criterion_by_key(study, key) if key else None
        include = request.query_params.get("include_judges", "true").lower() not in (
            "0",
            "false",
            "no",
        )
        rows = selectors.disagreements(study=study, criterion=criterion, include_judges=include)
        return Response(DisagreementRowSerializer(rows, many=True).data)


def _subject(study: Study, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"output": None, "comparison": None}
    if data.get("output") is not None:
        out["output"] = Output.objects.filter(study=study, pk=data["output"]).first()
        if out["output"] is None:
            raise ValidationFailed.at("output", "Unknown output.")
    if data.get("comparison") is not None:
        out["comparison"] = Comparison.objects.filter(study=study, pk=data["comparison"]).first()
        if out["comparison"] is None:
            raise ValidationFailed.at("comparison", "Unknown comparison.")
    return out


class AdjudicationListView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(AdjudicationSerializer), **ERRORS},
        summary="Adjudications (history; the latest per subject and criterion is in force)",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug)
        qs = Adjudication.objects.filter(criterion__rubric__study=study).select_related(
            "criterion", "adjudicated_by"
        )
        paginator = DefaultCursorPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(AdjudicationSerializer(page, many=True).data)

    @extend_schema(
        tags=TAG_LEAD,
        request=SubjectLabelRequestSerializer,
        responses={201: AdjudicationSerializer, **ERRORS},
        summary="Record an adjudicated label (kept apart from raw annotations)",
    )
    def post(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug, write=True)
        data = _validated(SubjectLabelRequestSerializer, request.data)
        adjudication = services.adjudication_record(
            study=study,
            criterion=_criterion_by_key(study, data["criterion"]),
            value=data["value"],
            note=data["note"],
            user=_user(request),
            **_subject(study, data),
        )
        return Response(AdjudicationSerializer(adjudication).data, status=status.HTTP_201_CREATED)


class GoldLabelListView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        parameters=PAGE_PARAMETERS,
        responses={200: paginated(GoldLabelSerializer), **ERRORS},
        summary="Gold labels (known answers used for quality control)",
    )
    def get(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug)
        qs = GoldLabel.objects.filter(criterion__rubric__study=study).select_related("criterion")
        paginator = DefaultCursorPagination()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(GoldLabelSerializer(page, many=True).data)

    @extend_schema(
        tags=TAG_LEAD,
        request=SubjectLabelRequestSerializer,
        responses={201: GoldLabelSerializer, **ERRORS},
        summary="Set the gold label of a subject and criterion (replaces an earlier one)",
    )
    def post(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug, write=True)
        data = _validated(SubjectLabelRequestSerializer, request.data)
        gold = services.gold_label_set(
            study=study,
            criterion=_criterion_by_key(study, data["criterion"]),
            value=data["value"],
            user=_user(request),
            **_subject(study, data),
        )
        return Response(GoldLabelSerializer(gold).data, status=status.HTTP_201_CREATED)


class MemberInviteView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        request=InviteRequestSerializer,
        responses={201: InviteResponseSerializer, **ERRORS},
        summary="Invite an existing account (it accepts) or someone new by e-mail",
        description="By `username`: an invitation that the account accepts or declines after "
        "signing in (`GET /api/invitations`); `status` is `invited` and `user_id` null whether "
        "or not an account of that name exists, so the answer tells nothing about which names "
        "exist. Staff and admins add an existing account at once (`added`); an existing "
        "member's role is changed (`added`). By `email` alone: a new account named after the "
        "address's local part with a random suffix, with a one-time password shown once "
        "(`created`), which its owner must change at first sign-in. Addresses are never "
        "looked up.",
    )
    def post(self, request: Request, slug: str) -> Response:
        study = _lead_study(request, slug, write=True)
        data = _validated(InviteRequestSerializer, request.data)
        result = services.annotator_invite(
            study=study,
            username=data["username"],
            email=data["email"],
            role=data["role"],
            invited_by=_user(request),
        )
        user = result.user
        body = {
            "status": result.status,
            "username": result.username,
            "role": result.role,
            "user_id": user.pk if user is not None else None,
            # Only an account made by this call shows its address: another account's stays
            # private.
            "email": user.email if result.status == "created" else "",
            "one_time_password": result.one_time_password,
        }
        return Response(body, status=status.HTTP_201_CREATED)


class MyInvitationsView(APIView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        responses={200: InvitationSerializer(many=True), **ERRORS},
        summary="Invitations waiting for the signed-in account's answer",
    )
    def get(self, request: Request) -> Response:
        invitations = services.invitations_pending_for(user=_user(request))
        return Response(InvitationSerializer(invitations, many=True).data)


class _MyInvitationAnswerView(APIView):
    """The invited account's answer; one view per answer, so each has its own operation."""

    def _answer(self, request: Request, invitation_id: int, *, accept: bool) -> Response:
        _require_write(request)
        if accept:
            services.invitation_accept(invitation_id=invitation_id, user=_user(request))
        else:
            services.invitation_decline(invitation_id=invitation_id, user=_user(request))
        invitation = Invitation.objects.select_related("study").get(pk=invitation_id)
        return Response(InvitationSerializer(invitation).data)


class MyInvitationAcceptView(_MyInvitationAnswerView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=None,
        responses={200: InvitationSerializer, **ERRORS},
        summary="Accept an invitation to a study",
        description="The account becomes a member with the invitation's role. 404 unless the "
        "invitation is pending and addressed to this account.",
    )
    def post(self, request: Request, invitation_id: int) -> Response:
        return self._answer(request, invitation_id, accept=True)


class MyInvitationDeclineView(_MyInvitationAnswerView):
    @extend_schema(
        tags=TAG_ANNOTATE,
        request=None,
        responses={200: InvitationSerializer, **ERRORS},
        summary="Decline an invitation to a study",
        description="Declining changes nothing else. 404 unless the invitation is pending and "
        "addressed to this account.",
    )
    def post(self, request: Request, invitation_id: int) -> Response:
        return self._answer(request, invitation_id, accept=False)


class MemberPasswordResetView(APIView):
    @extend_schema(
        tags=TAG_LEAD,
        request=None,
        responses={
            200: PasswordResetResponseSerializer,
            403: OpenApiResponse(description="Not a lead here, or the account may not be reset."),
            **ERRORS,
        },
        summary="Reset a member's password to a new one-time password (shown once)",
        description="A lead may reset only an account that this study's invitation created and "
        "that has no access beyond this study (no other study, no lead role, not staff or "
        "admin); otherwise 403 `password_reset_refused` with `details.reason` "
        "`not_created_here` or `wider_access`. An admin may reset any member's.",
    )
    def post(self, request: Request, slug: str, user_id: int) -> Response:
        study = _lead_study(request, slug, write=True)
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is None:
            raise NotFound("No such member in this study.")
        password = services.annotator_password_reset(study=study, user=user, by=_user(request))
        return Response(
            {"user_id": user.pk, "username": user.username, "one_time_password": password}
        )


class _AnyFormatNegotiation(APIView):
    """DRF reads `?format=` for renderer selection; here it names the export format instead."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return (JSONRenderer(), JSONRenderer.media_type)


class AnnotationExportView(_AnyFormatNegotiation):
    @extend_schema(
        tags=TAG_LEAD,
        parameters=[
            OpenApiParameter("format", OpenApiTypes.STR, enum=["csv", "jsonl"], required=False,
                             default="jsonl",
                             description="JSON Lines (the default) or CSV.")
        ],
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            **ERRORS,
        },
        summary="Export annotations (one row per annotation and criterion; names candidates)",
    )
    def get(self, request: Request, slug: str) -> StreamingHttpResponse:
        study = _lead_study(request, slug)
        fmt = request.query_params.get("format", "jsonl")
        if fmt == "csv":
            response = StreamingHttpResponse(
                export.export_csv(study=study), content_type="text/csv; charset=utf-8"
            )
        elif fmt == "jsonl":
            response = StreamingHttpResponse(
                export.export_jsonl(study=study), content_type="application/x-ndjson"
            )
        else:
            raise ValidationFailed.at("format", "format must be 'csv' or 'jsonl'.")
        response["Content-Disposition"] = f'attachment; filename="{study.slug}-annotations.{fmt}"'
        return response
