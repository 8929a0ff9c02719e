"""REST views for studies. Thin: access check -> validate -> service or selector -> serialize.

Every study-scoped view starts with `studies.access.api_study` (`study_access_get`, which asks
`reviewhub.capabilities`), so a caller without access gets 404 before anything else happens
(body validation included), and read-only tokens get 403 on every write. Annotators may read
the study, its rubric and strata, but not the lead data (candidates, outputs, items, plans,
members): their grading must stay blind.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import Count, QuerySet
from django.db.models.fields.json import KeyTextTransform
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from reviewhub.api.pagination import DefaultCursorPagination, IdCursorPagination
from reviewhub.capabilities import may_write
from reviewhub.errors import Forbidden, NotFound, ValidationFailed

from . import schema as _schema  # noqa: F401 - registers the auth extension
from . import selectors, services
from .access import api_study, token_scope
from .models import (
    AnalysisPlan,
    ApiToken,
    Candidate,
    Item,
    Membership,
    Output,
    RubricVersion,
    Study,
)
from .serializers import (
    AnalysisPlanSerializer,
    ApiTokenCreatedSerializer,
    ApiTokenCreateSerializer,
    ApiTokenSerializer,
    CandidateSerializer,
    ItemDetailSerializer,
    ItemSerializer,
    MembershipRoleSerializer,
    MembershipSerializer,
    MembershipWriteSerializer,
    OutputSerializer,
    PlanNewVersionSerializer,
    PlanPatchSerializer,
    PlanWriteSerializer,
    RubricSaveResponseSerializer,
    RubricUpdateSerializer,
    RubricVersionSerializer,
    StrataSerializer,
    StrataUpdateResultSerializer,
    StrataUpdateSerializer,
    StudyPatchSerializer,
    StudySerializer,
    StudyWriteSerializer,
    error_responses,
)

ERRORS = error_responses({
    400: "Validation failed (details.errors lists each problem with its path).",
    403: "Read-only token or role too low.",
    404: "No such study, or no access to it.",
})
CONFLICT = error_responses({409: "Conflict (e.g. a locked plan)."})

STRATUM_PARAM = OpenApiParameter(
    "stratum", OpenApiTypes.STR, many=True,
    description="`dimension:label`; repeat to require several strata (all must hold).",
)
META_PARAM = OpenApiParameter(
    "meta.<key>", OpenApiTypes.STR,
    description="Item metadata equality, e.g. `meta.language=de` (dots walk nested objects; "
                "repeat to accept any of several values; `3`/`true` also match numbers and "
                "booleans).",
)


def _body(request: Request) -> dict[str, Any]:
    data = request.data
    if not isinstance(data, dict):
        raise ValidationFailed("The request body must be a JSON object.",
                               details={"errors": [{"path": "$", "message": "must be an "
                                                                            "object"}]})
    return data




def _user(request: Request) -> User:
    # Every view here requires authentication (the default permission class).
    return cast(User, request.user)


def _params(request: Request) -> dict[str, list[str]]:
    return {k: v for k, v in request.query_params.lists()}


def _fake(view: Any) -> bool:
    return bool(getattr(view, "swagger_fake_view", False))


# --- Studies ----------------------------------------------------------------------------------

class StudyListCreate(generics.ListAPIView):
    serializer_class = StudySerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Study]:
        if _fake(self):
            return Study.objects.none()
        return selectors.studies_visible(user=self.request.user, token=self.request.auth)

    @extend_schema(summary="List the studies you can see",
                   responses={200: StudySerializer(many=True)})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(summary="Create a study (you become its lead)", request=StudyWriteSerializer,
                   responses={201: StudySerializer, **ERRORS, **CONFLICT})
    def post(self, request: Request) -> Response:
        token = request.auth
        if isinstance(token, ApiToken):
            if token.study_id is not None:
                raise Forbidden("A study-scoped token cannot create studies.")
            if not may_write(token_scope(token)):
                raise Forbidden("This API token is read-only.")
        study = services.study_create(owner=_user(request), fields=_body(request))
        return Response(StudySerializer(study).data, status=status.HTTP_201_CREATED)


class StudyDetail(generics.GenericAPIView):
    serializer_class = StudySerializer

    @extend_schema(summary="A study", responses={200: StudySerializer, **ERRORS})
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug).study
        return Response(StudySerializer(study).data)

    @extend_schema(summary="Update a study (status: draft -> open -> closed)",
                   request=StudyPatchSerializer, responses={200: StudySerializer, **ERRORS})
    def patch(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        study, _ = services.study_update(study=study, fields=_body(request))
        return Response(StudySerializer(study).data)


# --- Members ----------------------------------------------------------------------------------

class MemberListCreate(generics.ListAPIView):
    serializer_class = MembershipSerializer
    pagination_class = IdCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Membership]:
        if _fake(self):
            return Membership.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True).study
        return Membership.objects.filter(study=study).select_related("user")

    @extend_schema(summary="Members of a study", responses={200: MembershipSerializer(many=True),
                                                            **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(summary="Change a member's role (staff: also add an account)",
                   description="A lead changes the role of an existing member here; other "
                   "accounts join by accepting an invitation (POST "
                   "/api/studies/<slug>/annotators/invite). Staff and admins may add any "
                   "account. The last lead cannot be demoted (409).",
                   request=MembershipWriteSerializer,
                   responses={201: MembershipSerializer, 200: MembershipSerializer, **ERRORS,
                              **CONFLICT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        body = _body(request)
        username = body.get("username")
        user = get_user_model().objects.filter(username=username).first() if isinstance(
            username, str) else None
        actor = request.user
        staff = bool(getattr(actor, "is_staff", False) or getattr(actor, "is_superuser", False))
        if user is None or not (staff or Membership.objects.filter(study=study,
                                                                   user=user).exists()):
            # An account joins a study by accepting an invitation; the answer is the same
            # whether or not the name exists, so this cannot tell a lead which names do.
            raise ValidationFailed(
                f"{username!r} is not a member of this study. Invite the account instead "
                f"(POST /api/studies/{study.slug}/annotators/invite): it joins when it "
                "accepts.",
                details={"errors": [{"path": "username",
                                     "message": "not a member: invite the account"}]})
        membership, outcome = services.membership_set(study=study, user=user,
                                                      role=str(body.get("role", "")))
        code = status.HTTP_201_CREATED if outcome == "created" else status.HTTP_200_OK
        return Response(MembershipSerializer(membership).data, status=code)


class MemberDetail(generics.GenericAPIView):
    serializer_class = MembershipSerializer

    def _membership(self, study: Study, user_id: int) -> Membership:
        membership = Membership.objects.select_related("user").filter(
            study=study, user_id=user_id).first()
        if membership is None:
            raise NotFound(f"User {user_id} is not a member of this study.")
        return membership

    @extend_schema(summary="One member", responses={200: MembershipSerializer, **ERRORS})
    def get(self, request: Request, slug: str, user_id: int) -> Response:
        study = api_study(request, slug, judge_data=True).study
        return Response(MembershipSerializer(self._membership(study, user_id)).data)

    @extend_schema(summary="Change a member's role", request=MembershipRoleSerializer,
                   responses={200: MembershipSerializer, **ERRORS, **CONFLICT})
    def patch(self, request: Request, slug: str, user_id: int) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        membership = self._membership(study, user_id)
        membership, _ = services.membership_set(study=study, user=membership.user,
                                                role=str(_body(request).get("role", "")))
        return Response(MembershipSerializer(membership).data)

    @extend_schema(summary="Remove a member", responses={204: None, **ERRORS, **CONFLICT})
    def delete(self, request: Request, slug: str, user_id: int) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        membership = self._membership(study, user_id)
        services.membership_remove(study=study, user=membership.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Rubric -----------------------------------------------------------------------------------

def _rubric_queryset(study: Study) -> QuerySet[RubricVersion]:
    return (RubricVersion.objects.filter(study=study).select_related("created_by")
            .prefetch_related("criteria"))


class RubricCurrent(generics.GenericAPIView):
    serializer_class = RubricVersionSerializer

    @extend_schema(summary="The current rubric version", responses={200: RubricVersionSerializer,
                                                                    **ERRORS})
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug).study
        rubric = _rubric_queryset(study).order_by("-version").first()
        if rubric is None:
            raise NotFound("This study has no rubric yet.")
        return Response(RubricVersionSerializer(rubric).data)

    @extend_schema(
        summary="Replace the rubric's criteria",
        description="Edits the current version in place while nothing refers to its "
                    "criteria; once verdicts, annotations or judge jobs exist it creates the "
                    "next version holding exactly these criteria.",
        request=RubricUpdateSerializer,
        responses={200: RubricSaveResponseSerializer, 201: RubricSaveResponseSerializer,
                   **ERRORS},
    )
    def put(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        body = _body(request)
        rubric, outcome = services.rubric_update(
            study=study, criteria=body.get("criteria"),  # type: ignore[arg-type] # validated there
            created_by=_user(request),
            notes=str(body.get("notes") or ""),
            aggregate=body.get("aggregate"),
        )
        rubric = _rubric_queryset(study).get(pk=rubric.pk)
        data = {**RubricVersionSerializer(rubric).data, "outcome": outcome}
        code = status.HTTP_201_CREATED if outcome == "created" else status.HTTP_200_OK
        return Response(data, status=code)


class RubricVersionList(generics.ListAPIView):
    serializer_class = RubricVersionSerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[RubricVersion]:
        if _fake(self):
            return RubricVersion.objects.none()
        study = api_study(self.request, self.kwargs["slug"]).study
        return _rubric_queryset(study)

    @extend_schema(summary="All rubric versions, newest first",
                   responses={200: RubricVersionSerializer(many=True), **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class RubricVersionDetail(generics.GenericAPIView):
    serializer_class = RubricVersionSerializer

    @extend_schema(summary="One rubric version", responses={200: RubricVersionSerializer,
                                                            **ERRORS})
    def get(self, request: Request, slug: str, version: int) -> Response:
        study = api_study(request, slug).study
        rubric = _rubric_queryset(study).filter(version=version).first()
        if rubric is None:
            raise NotFound(f"Rubric v{version} not found.")
        return Response(RubricVersionSerializer(rubric).data)


# --- Strata -----------------------------------------------------------------------------------

def _strata_counts(study: Study) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for dim in study.dimensions.order_by("position", "id"):
        rows = (Item.objects.filter(study=study).annotate(label=KeyTextTransform(dim.key, "strata"))
                .values("label").annotate(n=Count("id")).order_by("label"))
        counts[dim.key] = {str(r["label"]) if r["label"] is not None else "(not computed)":
                           r["n"] for r in rows}
    return counts


class StrataScheme(generics.GenericAPIView):
    serializer_class = StrataSerializer

    @extend_schema(summary="The strata scheme and items per label",
                   responses={200: StrataSerializer, **ERRORS})
    def get(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug).study
        return Response({"dimensions": selectors.dimensions_current(study=study),
                         "counts": _strata_counts(study)})

    @extend_schema(summary="Replace the strata scheme (items are relabelled)",
                   request=StrataUpdateSerializer,
                   responses={200: StrataUpdateResultSerializer, **ERRORS, **CONFLICT})
    def put(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        body = _body(request)
        _, changed = services.dimension_set(
            study=study, dimensions=body.get("dimensions"))  # type: ignore[arg-type] # validated
        return Response({"dimensions": selectors.dimensions_current(study=study),
                         "counts": _strata_counts(study), "items_changed": changed})


# --- Items, candidates, outputs ---------------------------------------------------------------

class ItemList(generics.ListAPIView):
    serializer_class = ItemSerializer
    pagination_class = IdCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Item]:
        if _fake(self):
            return Item.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True).study
        return selectors.items_list(study=study, params=_params(self.request))

    @extend_schema(
        summary="Items of a study",
        parameters=[STRATUM_PARAM, META_PARAM,
                    OpenApiParameter("external_id", OpenApiTypes.STR, many=True)],
        responses={200: ItemSerializer(many=True), **ERRORS},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class ItemDetail(generics.GenericAPIView):
    serializer_class = ItemDetailSerializer

    @extend_schema(summary="One item", responses={200: ItemDetailSerializer, **ERRORS})
    def get(self, request: Request, slug: str, item_id: int) -> Response:
        study = api_study(request, slug, judge_data=True).study
        item = Item.objects.filter(study=study, pk=item_id).first()
        if item is None:
            raise NotFound(f"Item {item_id} not found.")
        return Response(ItemDetailSerializer(item).data)


class CandidateList(generics.ListAPIView):
    serializer_class = CandidateSerializer
    pagination_class = IdCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Candidate]:
        if _fake(self):
            return Candidate.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True).study
        return selectors.candidates_list(study=study, params=_params(self.request))

    @extend_schema(summary="Candidates of a study",
                   parameters=[OpenApiParameter("name", OpenApiTypes.STR, many=True)],
                   responses={200: CandidateSerializer(many=True), **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class CandidateDetail(generics.GenericAPIView):
    serializer_class = CandidateSerializer

    @extend_schema(summary="One candidate", responses={200: CandidateSerializer, **ERRORS})
    def get(self, request: Request, slug: str, candidate_id: int) -> Response:
        study = api_study(request, slug, judge_data=True).study
        candidate = Candidate.objects.filter(study=study, pk=candidate_id).first()
        if candidate is None:
            raise NotFound(f"Candidate {candidate_id} not found.")
        return Response(CandidateSerializer(candidate).data)


class OutputList(generics.ListAPIView):
    serializer_class = OutputSerializer
    pagination_class = IdCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Output]:
        if _fake(self):
            return Output.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True).study
        return selectors.outputs_list(study=study, params=_params(self.request))

    @extend_schema(
        summary="Outputs of a study",
        parameters=[
            OpenApiParameter("candidate", OpenApiTypes.STR, many=True,
                             description="Candidate name; repeat for any of several."),
            OpenApiParameter("item", OpenApiTypes.STR, many=True,
                             description="Item external id."),
            STRATUM_PARAM, META_PARAM,
            OpenApiParameter("output_meta.<key>", OpenApiTypes.STR,
                             description="Equality on the output's own metadata."),
            OpenApiParameter("has_error", OpenApiTypes.BOOL),
            OpenApiParameter("schema_valid", OpenApiTypes.STR, enum=["true", "false", "null"]),
        ],
        responses={200: OutputSerializer(many=True), **ERRORS},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class OutputDetail(generics.GenericAPIView):
    serializer_class = OutputSerializer

    @extend_schema(summary="One output", responses={200: OutputSerializer, **ERRORS})
    def get(self, request: Request, slug: str, output_id: int) -> Response:
        study = api_study(request, slug, judge_data=True).study
        output = (Output.objects.select_related("item", "candidate")
                  .filter(study=study, pk=output_id).first())
        if output is None:
            raise NotFound(f"Output {output_id} not found.")
        return Response(OutputSerializer(output).data)


# --- Analysis plans ---------------------------------------------------------------------------

def _plans(study: Study) -> QuerySet[AnalysisPlan]:
    return AnalysisPlan.objects.filter(study=study).select_related("created_by", "locked_by")


def _plan(study: Study, version: int) -> AnalysisPlan:
    plan = _plans(study).filter(version=version).first()
    if plan is None:
        raise NotFound(f"Plan v{version} not found.")
    return plan


class PlanListCreate(generics.ListAPIView):
    serializer_class = AnalysisPlanSerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[AnalysisPlan]:
        if _fake(self):
            return AnalysisPlan.objects.none()
        study = api_study(self.request, self.kwargs["slug"], judge_data=True).study
        return _plans(study)

    @extend_schema(summary="Analysis plan versions, newest first",
                   responses={200: AnalysisPlanSerializer(many=True), **ERRORS})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(summary="Create the study's first analysis plan", request=PlanWriteSerializer,
                   responses={201: AnalysisPlanSerializer, **ERRORS, **CONFLICT})
    def post(self, request: Request, slug: str) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        body = _body(request)
        plan = services.plan_create(study=study, spec=body.get("spec"), created_by=_user(request),
                                    notes=str(body.get("notes") or ""))
        return Response(AnalysisPlanSerializer(_plan(study, plan.version)).data,
                        status=status.HTTP_201_CREATED)


class PlanDetail(generics.GenericAPIView):
    serializer_class = AnalysisPlanSerializer

    @extend_schema(summary="One analysis plan version",
                   responses={200: AnalysisPlanSerializer, **ERRORS})
    def get(self, request: Request, slug: str, version: int) -> Response:
        study = api_study(request, slug, judge_data=True).study
        return Response(AnalysisPlanSerializer(_plan(study, version)).data)

    @extend_schema(summary="Edit an unlocked plan (409 once locked)", request=PlanPatchSerializer,
                   responses={200: AnalysisPlanSerializer, **ERRORS, **CONFLICT})
    def patch(self, request: Request, slug: str, version: int) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        plan = _plan(study, version)
        body = _body(request)
        notes = body.get("notes")
        services.plan_update(plan=plan, spec=body.get("spec", plan.spec),
                             notes=str(notes) if notes is not None else None)
        return Response(AnalysisPlanSerializer(_plan(study, version)).data)


class PlanLock(generics.GenericAPIView):
    serializer_class = AnalysisPlanSerializer

    @extend_schema(summary="Lock (pre-register) a plan", request=None,
                   responses={200: AnalysisPlanSerializer, **ERRORS, **CONFLICT})
    def post(self, request: Request, slug: str, version: int) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        services.plan_lock(plan=_plan(study, version), user=_user(request))
        return Response(AnalysisPlanSerializer(_plan(study, version)).data)


class PlanNewVersion(generics.GenericAPIView):
    serializer_class = AnalysisPlanSerializer

    @extend_schema(summary="Save a new plan version (from this one's spec unless given)",
                   request=PlanNewVersionSerializer,
                   responses={201: AnalysisPlanSerializer, **ERRORS})
    def post(self, request: Request, slug: str, version: int) -> Response:
        study = api_study(request, slug, write=True, lead=True).study
        source = _plan(study, version)
        body = _body(request)
        plan = services.plan_new_version(study=study, spec=body.get("spec", source.spec),
                                         created_by=_user(request),
                                         notes=str(body.get("notes") or ""))
        return Response(AnalysisPlanSerializer(_plan(study, plan.version)).data,
                        status=status.HTTP_201_CREATED)


# --- Tokens -----------------------------------------------------------------------------------

def _token_manager_check(request: Request, *, write: bool) -> None:
    token = request.auth
    if isinstance(token, ApiToken):
        if token.study_id is not None:
            raise Forbidden("Manage tokens in the browser (/account/tokens/) or with an "
                            "account-wide token.")
        if write and not may_write(token_scope(token)):
            raise Forbidden("This API token is read-only.")


class TokenListCreate(generics.ListAPIView):
    serializer_class = ApiTokenSerializer
    pagination_class = DefaultCursorPagination
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[ApiToken]:
        if _fake(self):
            return ApiToken.objects.none()
        _token_manager_check(self.request, write=False)
        # A revoked token is gone from the API (as DELETE promises); the admin keeps the record.
        return ApiToken.objects.filter(user_id=_user(self.request).pk,
                                       revoked_at__isnull=True).select_related("study")

    @extend_schema(summary="Your live API tokens (secrets are never shown again)",
                   responses={200: ApiTokenSerializer(many=True), 403: ERRORS[403]})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(summary="Create a token; the response holds its secret, once",
                   request=ApiTokenCreateSerializer,
                   responses={201: ApiTokenCreatedSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        _token_manager_check(request, write=True)
        body = _body(request)
        study = None
        if body.get("study"):
            study = Study.objects.filter(slug=str(body["study"])).first()
            if study is None:
                raise NotFound(f"Study '{body['study']}' not found.")
        can_write = body.get("can_write", False)
        if not isinstance(can_write, bool):
            raise ValidationFailed("can_write must be true or false.", details={
                "errors": [{"path": "can_write", "message": "must be true or false"}]})
        token, secret = services.api_token_create(user=_user(request), name=body.get("name", ""),
                                                  study=study, can_write=can_write)
        data = ApiTokenCreatedSerializer(token, context={"secret": secret}).data
        return Response(data, status=status.HTTP_201_CREATED)


class TokenDetail(generics.GenericAPIView):
    serializer_class = ApiTokenSerializer

    def _token(self, request: Request, token_id: int) -> ApiToken:
        token = ApiToken.objects.select_related("study").filter(
            pk=token_id, user_id=_user(request).pk, revoked_at__isnull=True).first()
        if token is None:
            raise NotFound(f"Token {token_id} not found.")
        return token

    @extend_schema(summary="One of your tokens", responses={200: ApiTokenSerializer, **ERRORS})
    def get(self, request: Request, token_id: int) -> Response:
        _token_manager_check(request, write=False)
        return Response(ApiTokenSerializer(self._token(request, token_id)).data)

    @extend_schema(summary="Revoke one of your tokens",
                   description="Answers the revoked token once; from then on the token is "
                               "gone: it authenticates nothing, is not listed, and GET or "
                               "DELETE on it answer 404.",
                   responses={200: ApiTokenSerializer, **ERRORS})
    def delete(self, request: Request, token_id: int) -> Response:
        _token_manager_check(request, write=True)
        token = services.api_token_revoke(token=self._token(request, token_id))
        return Response(ApiTokenSerializer(token).data)
