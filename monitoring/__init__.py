"""Monitoring after launch: the shipped candidate watched on live traffic.

This app owns deployments (a study's shipped candidate, shadow candidates, the locked plan,
judges and calibration snapshot in force), live traffic rows (idempotent on the application's
request id, strata assigned by the study's scheme frozen at deployment, Poisson sampling to the
judges and the human queue with recorded inclusion probabilities), the labels traffic rows
receive (judge verdicts and human grades), windows (hourly/daily, per stratum: mix, pass rate
judge-only and prediction-powered, gates, behaviour signals, prompt-injection rate) and alerts
(anytime-valid, deduplicated, with a cool-down, acknowledge/resolve and a history).

The window computation is a report kind of the usual shape (`monitoring.window`: params,
load, compute, results, present). Statistics are pure functions in `evalstats`.
"""
