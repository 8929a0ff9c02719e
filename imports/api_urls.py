"""REST routes of the imports app (included under /api/)."""

from django.urls import path

from . import api

urlpatterns = [
    # Before the tools' route, which would take "ratings" for a tool's name.
    path("studies/<slug:slug>/imports/ratings", api.RatingsImportView.as_view(),
         name="api-ratings-import"),
    path("studies/<slug:slug>/imports/<str:tool>", api.PeerImportView.as_view(),
         name="api-peer-import"),
]
