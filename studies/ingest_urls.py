"""Bulk ingest routes (included under /api/ by the project urls)."""

from reviewhub.routes import routes

from . import ingest_views

urlpatterns = routes("studies/<slug:slug>/", [
    ("items/bulk", ingest_views.ItemBulkIngest, "api-items-bulk"),
    ("candidates/bulk", ingest_views.CandidateBulkIngest, "api-candidates-bulk"),
    ("outputs/bulk", ingest_views.OutputBulkIngest, "api-outputs-bulk"),
])
