from django.urls import path

from . import views
from .agreement import views as agreement_views
from .calibration import views as calibration_views
from .selection import views as selection_views

urlpatterns = [
    path("studies/<slug:slug>/reports/", views.reports_list, name="reports-list"),
    path("studies/<slug:slug>/reports/<int:report_id>/", agreement_views.report_audit,
         name="reports-audit"),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/heatmap.svg",
        agreement_views.report_heatmap,
        name="reports-heatmap",
    ),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/bias.svg",
        agreement_views.report_bias,
        name="reports-bias",
    ),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/disagreements/",
        agreement_views.report_disagreements,
        name="reports-disagreements",
    ),
    path("studies/<slug:slug>/calibration", calibration_views.calibration_page,
         name="reports-calibration"),
    path(
        "studies/<slug:slug>/calibration/<int:snapshot_id>/reliability.svg",
        calibration_views.calibration_reliability,
        name="reports-calibration-reliability",
    ),
    path("studies/<slug:slug>/selection/", selection_views.selection_page,
         name="reports-selection"),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/",
        selection_views.selection_detail,
        name="reports-selection-detail",
    ),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/forest-<int:metric>.svg",
        selection_views.selection_forest,
        name="reports-selection-forest",
    ),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/pareto.svg",
        selection_views.selection_pareto,
        name="reports-selection-pareto",
    ),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/report.pdf",
        selection_views.selection_report_pdf,
        name="reports-selection-pdf",
    ),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/next-labels/",
        selection_views.selection_next_labels,
        name="reports-selection-next-labels",
    ),
    path(
        "studies/<slug:slug>/selection/<int:snapshot_id>/<str:table>.csv",
        selection_views.selection_csv,
        name="reports-selection-csv",
    ),
]
