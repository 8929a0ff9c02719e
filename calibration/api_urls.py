"""Calibrated-score endpoints (included under /api/ by reviewhub/urls.py)."""

from reviewhub.routes import routes

from . import api

urlpatterns = routes("studies/<slug:slug>/calibrated-scores", [
    ("", api.CalibratedScoreList, "calibration-api-scores"),
    ("/export", api.CalibratedScoreExport, "calibration-api-export"),
    ("/escalations", api.EscalationCreate, "calibration-api-escalations"),
])
