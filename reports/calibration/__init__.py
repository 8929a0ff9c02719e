"""The calibration report kind's part in `reports`: its registration (kind.py: parameters
from the plan, the load, and the record hook that writes the calibrated scores with the
snapshot), its reliability diagrams (charts.py) and the lead's calibration page (views.py).

The computation itself (params, inputs load, compute, results) and the calibrated scores it
writes live in the `calibration` app, below `reports`, because the calibrated-score API, the
escalations and the selection report read them there.
"""
