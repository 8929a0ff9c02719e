"""Bulk ingest routes (included under /api/ by the project urls)."""

from django.urls import path

from . import ingest_views

urlpatterns = [
    path("studies/<slug:slug>/items/bulk", ingest_views.ItemBulkIngest.as_view(),
         name="api-items-bulk"),
    path("studies/<slug:slug>/candidates/bulk", ingest_views.CandidateBulkIngest.as_view(),
         name="api-candidates-bulk"),
    path("studies/<slug:slug>/outputs/bulk", ingest_views.OutputBulkIngest.as_view(),
         name="api-outputs-bulk"),
]
