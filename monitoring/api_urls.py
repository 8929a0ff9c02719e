from django.urls import path

from . import api, langfuse_api

urlpatterns = [
    path("studies/<slug:slug>/deployments", api.DeploymentList.as_view(),
         name="monitoring-api-deployments"),
    path("deployments/<int:deployment_id>", api.DeploymentDetail.as_view(),
         name="monitoring-api-deployment"),
    path("deployments/<int:deployment_id>/traffic", api.TrafficCreate.as_view(),
         name="monitoring-api-traffic"),
    path("deployments/<int:deployment_id>/labels", api.LabelsCreate.as_view(),
         name="monitoring-api-labels"),
    path("deployments/<int:deployment_id>/windows", api.WindowList.as_view(),
         name="monitoring-api-windows"),
    path("deployments/<int:deployment_id>/windows/export", api.WindowExport.as_view(),
         name="monitoring-api-windows-export"),
    path("deployments/<int:deployment_id>/alerts", api.AlertList.as_view(),
         name="monitoring-api-alerts"),
    path("deployments/<int:deployment_id>/alerts/<int:alert_id>/acknowledge",
         api.AlertAcknowledge.as_view(), name="monitoring-api-alert-acknowledge"),
    path("deployments/<int:deployment_id>/alerts/<int:alert_id>/resolve",
         api.AlertResolve.as_view(), name="monitoring-api-alert-resolve"),
    path("deployments/<int:deployment_id>/reopen", api.ReopenCreate.as_view(),
         name="monitoring-api-reopen"),
    path("deployments/<int:deployment_id>/langfuse", langfuse_api.LangfuseSourceDetail.as_view(),
         name="monitoring-api-langfuse"),
    path("deployments/<int:deployment_id>/langfuse/pull", langfuse_api.LangfusePull.as_view(),
         name="monitoring-api-langfuse-pull"),
]
