"""LLM and programmatic judges: versioned configurations (any change makes a new version),
providers behind a small dataclass interface (`judges.providers`), prompts and parsing, judge
runs fanned out as one job per (version, subject, criterion[, sample, order]) on the queue
machinery (claims, leases, retries, rate limits) in `judges.runs`, and the verdicts they
record, imported or pushed from elsewhere through the same services."""
