"""Human annotation: who annotates (members), what they are given (sampling plans that record
each draw's inclusion probability, the assignment queue, escalations from calibration), what
they record (annotations with severity, revisions, gold labels, adjudications) and the blind
grading pages and API. Writes go through `annotations.services`; the statistics read these
rows only through `calibration.frames`."""
