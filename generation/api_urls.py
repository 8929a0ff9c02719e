"""Candidate-run endpoints (included under /api/ by reviewhub/urls.py)."""

from django.urls import path

from . import api

urlpatterns = [
    path("studies/<slug:slug>/generation-configs", api.GenerationConfigListCreate.as_view(),
         name="api-generation-configs"),
    path("studies/<slug:slug>/prompt-templates", api.PromptTemplateListCreate.as_view(),
         name="api-prompt-templates"),
    path("studies/<slug:slug>/prompt-templates/<int:template_id>/preview",
         api.PromptTemplatePreview.as_view(), name="api-prompt-template-preview"),
    path("studies/<slug:slug>/generation-runs", api.GenerationRunListCreate.as_view(),
         name="api-generation-runs"),
    path("studies/<slug:slug>/generation-runs/estimate", api.GenerationRunEstimate.as_view(),
         name="api-generation-run-estimate"),
    path("studies/<slug:slug>/generation-runs/<int:generation_run_id>",
         api.GenerationRunDetail.as_view(), name="api-generation-run"),
    path("studies/<slug:slug>/generation-runs/<int:generation_run_id>/cancel",
         api.GenerationRunCancel.as_view(), name="api-generation-run-cancel"),
    path("studies/<slug:slug>/generation-runs/<int:generation_run_id>/resume",
         api.GenerationRunResume.as_view(), name="api-generation-run-resume"),
]
