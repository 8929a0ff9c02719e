"""Report snapshots: one lifecycle (`services`: validate, claim, compute with no
transaction open, record, retry) for every kind, the kind registry (`kinds`), the snapshots'
API and pages, and one package per kind of the same shape (params, load, compute, results,
present, views): `selection`, the calibration kind's registration, charts and page
(`reports.calibration`), and agreement (`agreement` plus the root modules results, charts,
audit_*, export and views). The snapshot row itself is `snapshots.models.ReportSnapshot`.
ARCHITECTURE.md maps them."""
