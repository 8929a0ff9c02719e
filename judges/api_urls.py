"""Judge, judge-version, judge run and verdict endpoints (included under /api/ by
reviewhub/urls.py)."""

from django.urls import path

from . import api, run_api

urlpatterns = [
    path("studies/<slug:slug>/judges", api.JudgeListCreate.as_view(), name="api-judges"),
    path("studies/<slug:slug>/judges/connection-test", api.JudgeConnectionTest.as_view(),
         name="api-judge-connection-test"),
    path("studies/<slug:slug>/judges/<int:judge_id>", api.JudgeDetail.as_view(),
         name="api-judge"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions",
         api.JudgeVersionListCreate.as_view(), name="api-judge-versions"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>",
         api.JudgeVersionDetail.as_view(), name="api-judge-version"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>/preview",
         api.JudgeVersionPreview.as_view(), name="api-judge-version-preview"),
    path("studies/<slug:slug>/judge-runs", run_api.JudgeRunListCreate.as_view(),
         name="judge-run-list"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>", run_api.JudgeRunDetail.as_view(),
         name="judge-run-detail"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>/cancel", run_api.JudgeRunCancel.as_view(),
         name="judge-run-cancel"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>/resume", run_api.JudgeRunResume.as_view(),
         name="judge-run-resume"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>/rerun", run_api.JudgeRunRerun.as_view(),
         name="judge-run-rerun"),
    path("studies/<slug:slug>/verdicts", run_api.VerdictList.as_view(), name="verdict-list"),
    path("studies/<slug:slug>/verdicts/bulk", api.VerdictBulkPush.as_view(),
         name="verdict-bulk-push"),
]
