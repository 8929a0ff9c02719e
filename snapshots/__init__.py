"""Report snapshots as rows: the `ReportSnapshot` model (kind, parameters, plan version, input
fingerprint, status, typed result JSON) and the plain reads of finished ones (`selectors`).

The model sits below `calibration` in the app order so that calibrated scores and deployments
can hold a real foreign key to the snapshot they belong to; everything a snapshot does (the one
lifecycle of every kind, the kind registry, the API and pages) stays in `reports`."""
