"""Judge and judge-version endpoints (included under /api/ by reviewhub/urls.py)."""

from django.urls import path

from . import api

urlpatterns = [
    path("studies/<slug:slug>/judges", api.JudgeListCreate.as_view(), name="api-judges"),
    path("studies/<slug:slug>/judges/<int:judge_id>", api.JudgeDetail.as_view(),
         name="api-judge"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions",
         api.JudgeVersionListCreate.as_view(), name="api-judge-versions"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>",
         api.JudgeVersionDetail.as_view(), name="api-judge-version"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>/preview",
         api.JudgeVersionPreview.as_view(), name="api-judge-version-preview"),
]
