"""The selection report: which candidate to ship, per stratum and for the deployment mix
(docs/reports.md, "Selection report"). This package owns the kind end to end:

params (pure: validation), inputs (the plain types a snapshot reads) and readings (stored
values as numbers), load and comparisons (the one lean read of a study, through
calibration.frames), compute (the steps: setting, estimates, gates, thresholds, rankings,
differences, flips, frontier) with cells, pairwise and outcome (public vs private, the
decision table of decision.py, the next labels), results (the typed JSON and its schema),
present (tables and CSV, the page's view, charts, PDF), views (the pages) and actions (the
sampling plan of the next labels). The kind registers in reports/kinds.py.
"""
