"""The judge e2e harness's worker fixture, shared by the candidate-run e2e tests."""

from tests.judges.test_worker_e2e import workers  # noqa: F401
