"""The evidence read model (frames.py) and, later, calibration fits, cost model and policies."""
