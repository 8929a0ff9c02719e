"""Judge, judge-version, judge run and verdict endpoints (included under /api/ by
reviewhub/urls.py)."""

from reviewhub.routes import routes

from . import api, run_api

urlpatterns = [
    *routes("studies/<slug:slug>/judges", [
        ("", api.JudgeListCreate, "api-judges"),
        ("/connection-test", api.JudgeConnectionTest, "api-judge-connection-test"),
        ("/<int:judge_id>", api.JudgeDetail, "api-judge"),
        ("/<int:judge_id>/versions", api.JudgeVersionListCreate, "api-judge-versions"),
        ("/<int:judge_id>/versions/<int:version_id>", api.JudgeVersionDetail,
         "api-judge-version"),
        ("/<int:judge_id>/versions/<int:version_id>/preview", api.JudgeVersionPreview,
         "api-judge-version-preview"),
    ]),
    *routes("studies/<slug:slug>/judge-runs", [
        ("", run_api.JudgeRunListCreate, "judge-run-list"),
        ("/<int:run_id>", run_api.JudgeRunDetail, "judge-run-detail"),
        ("/<int:run_id>/cancel", run_api.JudgeRunCancel, "judge-run-cancel"),
        ("/<int:run_id>/resume", run_api.JudgeRunResume, "judge-run-resume"),
        ("/<int:run_id>/rerun", run_api.JudgeRunRerun, "judge-run-rerun"),
    ]),
    *routes("studies/<slug:slug>/verdicts", [
        ("", run_api.VerdictList, "verdict-list"),
        ("/bulk", api.VerdictBulkPush, "verdict-bulk-push"),
    ]),
]
