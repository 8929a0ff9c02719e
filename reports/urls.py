from django.urls import path

from . import views

urlpatterns = [
    path("studies/<slug:slug>/reports/", views.reports_list, name="reports-list"),
    path("studies/<slug:slug>/reports/<int:report_id>/", views.report_audit, name="reports-audit"),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/heatmap.svg",
        views.report_heatmap,
        name="reports-heatmap",
    ),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/bias.svg",
        views.report_bias,
        name="reports-bias",
    ),
    path(
        "studies/<slug:slug>/reports/<int:report_id>/disagreements/",
        views.report_disagreements,
        name="reports-disagreements",
    ),
    path("studies/<slug:slug>/calibration", views.calibration_page, name="reports-calibration"),
    path(
        "studies/<slug:slug>/calibration/<int:snapshot_id>/reliability.svg",
        views.calibration_reliability,
        name="reports-calibration-reliability",
    ),
]
