"""Judge and judge run pages (included at / by reviewhub/urls.py)."""

from django.urls import path

from . import run_views, views

urlpatterns = [
    path("studies/<slug:slug>/judges/", views.judge_list_page, name="judge-list-page"),
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>/preview/",
         views.preview_page, name="judge-version-preview-page"),
    path("studies/<slug:slug>/judge-runs/", run_views.run_list_page, name="judge-run-list-page"),
    path("studies/<slug:slug>/judge-runs/<int:run_id>/", run_views.run_detail_page,
         name="judge-run-detail-page"),
]
