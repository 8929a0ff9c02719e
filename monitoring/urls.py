"""Monitoring pages (included at / by reviewhub/urls.py)."""

from django.urls import path

from . import views

urlpatterns = [
    path("studies/<slug:slug>/deployments/", views.deployment_list_page,
         name="monitoring-list"),
    path("studies/<slug:slug>/deployments/<int:deployment_id>/", views.deployment_page,
         name="monitoring-page"),
    path("studies/<slug:slug>/deployments/<int:deployment_id>/pass-rate.svg",
         views.deployment_chart, name="monitoring-chart"),
]
