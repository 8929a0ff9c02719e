"""Candidate-run endpoints (included under /api/ by reviewhub/urls.py)."""

from reviewhub.routes import routes

from . import api

urlpatterns = [
    *routes("studies/<slug:slug>/generation-configs", [
        ("", api.GenerationConfigListCreate, "api-generation-configs"),
    ]),
    *routes("studies/<slug:slug>/prompt-templates", [
        ("", api.PromptTemplateListCreate, "api-prompt-templates"),
        ("/<int:template_id>/preview", api.PromptTemplatePreview, "api-prompt-template-preview"),
    ]),
    *routes("studies/<slug:slug>/generation-runs", [
        ("", api.GenerationRunListCreate, "api-generation-runs"),
        ("/estimate", api.GenerationRunEstimate, "api-generation-run-estimate"),
        ("/<int:generation_run_id>", api.GenerationRunDetail, "api-generation-run"),
        ("/<int:generation_run_id>/cancel", api.GenerationRunCancel, "api-generation-run-cancel"),
        ("/<int:generation_run_id>/resume", api.GenerationRunResume, "api-generation-run-resume"),
    ]),
]
