"""Monitoring pages (included at / by reviewhub/urls.py)."""

from reviewhub.routes import routes

from . import views

urlpatterns = routes("studies/<slug:slug>/deployments/", [
    ("", views.deployment_list_page, "monitoring-list"),
    ("<int:deployment_id>/", views.deployment_page, "monitoring-page"),
    ("<int:deployment_id>/pass-rate.svg", views.deployment_chart, "monitoring-chart"),
])
