from django.urls import path

from . import api

urlpatterns = [
    path("studies/<slug:slug>/calibrated-scores", api.CalibratedScoreList.as_view(),
         name="calibration-api-scores"),
    path("studies/<slug:slug>/calibrated-scores/export", api.CalibratedScoreExport.as_view(),
         name="calibration-api-export"),
    path("studies/<slug:slug>/calibrated-scores/escalations", api.EscalationCreate.as_view(),
         name="calibration-api-escalations"),
]
