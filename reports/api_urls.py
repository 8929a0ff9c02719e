from django.urls import path

from . import api
from .agreement import api as agreement_api

urlpatterns = [
    path(
        "studies/<slug:slug>/reports/agreement/",
        api.ReportListCreateView.as_view(),
        name="reports-api-list",
    ),
    path(
        "studies/<slug:slug>/reports/agreement/<int:report_id>/",
        api.ReportDetailView.as_view(),
        name="reports-api-detail",
    ),
    path(
        "studies/<slug:slug>/reports/agreement/<int:report_id>/export.csv",
        agreement_api.ReportExportView.as_view(),
        name="reports-api-export",
    ),
    path(
        "studies/<slug:slug>/reports/calibration/",
        api.CalibrationReportListCreateView.as_view(),
        name="reports-api-calibration-list",
    ),
    path(
        "studies/<slug:slug>/reports/calibration/<int:snapshot_id>/",
        api.CalibrationReportDetailView.as_view(),
        name="reports-api-calibration-detail",
    ),
    path(
        "studies/<slug:slug>/reports/selection/",
        api.SelectionReportListCreateView.as_view(),
        name="reports-api-selection-list",
    ),
    path(
        "studies/<slug:slug>/reports/selection/<int:snapshot_id>/",
        api.SelectionReportDetailView.as_view(),
        name="reports-api-selection-detail",
    ),
    path(
        "studies/<slug:slug>/reports/selection/<int:snapshot_id>/next-labels/",
        api.SelectionNextLabelsView.as_view(),
        name="reports-api-selection-next-labels",
    ),
]
