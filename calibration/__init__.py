"""The evidence read model and calibration: `frames` reads every rating with its score,
probability, severity, inclusion probability, gold and adjudication (and holds the one rule
for which human label counts); `params`, `compute` and `results` turn it into a calibration
snapshot (P(pass) per judge version x criterion x stratum, costs, thresholds, guaranteed
agreement); the calibrated scores it writes (`models`, the bulk COPY writer in `services`,
`selectors`, `export`, `api`) and the escalations that send uncertain outputs to humans."""
