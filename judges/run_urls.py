"""Judge run pages (included at / by reviewhub/urls.py)."""

from django.urls import path

from . import run_views

urlpatterns = [
    path("studies/<slug:slug>/judge-runs/", run_views.run_list_page, name="judge-run-list-page"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>/", run_views.run_detail_page,
         name="judge-run-detail-page"),
]
