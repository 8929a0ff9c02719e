"""REST routes of the studies app (included under /api/). Bulk ingest routes live in
`studies/ingest_urls.py`."""

from django.urls import path

from . import api

urlpatterns = [
    path("studies", api.StudyListCreate.as_view(), name="api-studies"),
    path("studies/<slug:slug>", api.StudyDetail.as_view(), name="api-study"),
    path("studies/<slug:slug>/members", api.MemberListCreate.as_view(), name="api-members"),
    path("studies/<slug:slug>/members/<int:user_id>", api.MemberDetail.as_view(),
         name="api-member"),
    path("studies/<slug:slug>/rubric", api.RubricCurrent.as_view(), name="api-rubric"),
    path("studies/<slug:slug>/rubric/versions", api.RubricVersionList.as_view(),
         name="api-rubric-versions"),
    path("studies/<slug:slug>/rubric/versions/<int:version>", api.RubricVersionDetail.as_view(),
         name="api-rubric-version"),
    path("studies/<slug:slug>/strata", api.StrataScheme.as_view(), name="api-strata"),
    path("studies/<slug:slug>/items", api.ItemList.as_view(), name="api-items"),
    path("studies/<slug:slug>/items/<int:item_id>", api.ItemDetail.as_view(), name="api-item"),
    path("studies/<slug:slug>/candidates", api.CandidateList.as_view(), name="api-candidates"),
    path("studies/<slug:slug>/candidates/<int:candidate_id>", api.CandidateDetail.as_view(),
         name="api-candidate"),
    path("studies/<slug:slug>/outputs", api.OutputList.as_view(), name="api-outputs"),
    path("studies/<slug:slug>/outputs/<int:output_id>", api.OutputDetail.as_view(),
         name="api-output"),
    path("studies/<slug:slug>/plans", api.PlanListCreate.as_view(), name="api-plans"),
    path("studies/<slug:slug>/plans/<int:version>", api.PlanDetail.as_view(), name="api-plan"),
    path("studies/<slug:slug>/plans/<int:version>/lock", api.PlanLock.as_view(),
         name="api-plan-lock"),
    path("studies/<slug:slug>/plans/<int:version>/new-version", api.PlanNewVersion.as_view(),
         name="api-plan-new-version"),
    path("tokens", api.TokenListCreate.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>", api.TokenDetail.as_view(), name="api-token"),
]
