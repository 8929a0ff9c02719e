"""Reports own no table: the snapshot row every kind shares is `snapshots.models.ReportSnapshot`
(below `calibration`, so that calibrated scores can hold a foreign key to it).

The name stays importable from here for the demo seed command, which reads it from this module.
"""

from snapshots.models import ReportSnapshot

__all__ = ["ReportSnapshot"]
