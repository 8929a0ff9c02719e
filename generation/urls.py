"""Candidate-run pages (included at / by reviewhub/urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("studies/<slug:slug>/generation/", views.runs_page, name="generation-runs-page"),
    path("studies/<slug:slug>/generation/runs/<int:generation_run_id>/", views.run_page,
         name="generation-run-page"),
]
