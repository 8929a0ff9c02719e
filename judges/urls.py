"""Judge pages (included at / by reviewhub/urls.py); run pages are in `judges/run_urls.py`."""

from django.urls import path

from . import views

urlpatterns = [
    path("studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>/preview/",
         views.preview_page, name="judge-version-preview-page"),
]
