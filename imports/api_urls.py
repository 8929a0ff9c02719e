"""REST routes of the imports app (included under /api/)."""

from django.urls import path

from . import api

urlpatterns = [
    path("studies/<slug:slug>/imports/<str:tool>", api.PeerImportView.as_view(),
         name="api-peer-import"),
]
