"""Deployment endpoints: a study's deployments, then each deployment's traffic, labels,
windows, alerts and Langfuse source (included under /api/ by reviewhub/urls.py)."""

from reviewhub.routes import routes

from . import api, langfuse_api

urlpatterns = [
    *routes("studies/<slug:slug>/deployments", [
        ("", api.DeploymentList, "monitoring-api-deployments"),
    ]),
    *routes("deployments/<int:deployment_id>", [
        ("", api.DeploymentDetail, "monitoring-api-deployment"),
        ("/traffic", api.TrafficCreate, "monitoring-api-traffic"),
        ("/labels", api.LabelsCreate, "monitoring-api-labels"),
        ("/windows", api.WindowList, "monitoring-api-windows"),
        ("/windows/export", api.WindowExport, "monitoring-api-windows-export"),
        ("/alerts", api.AlertList, "monitoring-api-alerts"),
        ("/alerts/<int:alert_id>/acknowledge", api.AlertAcknowledge,
         "monitoring-api-alert-acknowledge"),
        ("/alerts/<int:alert_id>/resolve", api.AlertResolve, "monitoring-api-alert-resolve"),
        ("/reopen", api.ReopenCreate, "monitoring-api-reopen"),
        ("/langfuse", langfuse_api.LangfuseSourceDetail, "monitoring-api-langfuse"),
        ("/langfuse/pull", langfuse_api.LangfusePull, "monitoring-api-langfuse-pull"),
    ]),
]
