from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Models are importable only once the registry is ready, hence the imports here.
        from studies.services import rubric_use_register

        from . import celery_tasks
        from .runs import run_enqueue_register
        from .selectors import rubric_referenced

        rubric_use_register("judges", rubric_referenced)
        # The run services queue their batch tasks through the task module, which imports
        # them; it is handed in here instead. Looked up on each call, so a test's patch of
        # `celery_tasks.judge_run_enqueue` is seen.
        def enqueue(run_id: int, n: int) -> None:
            celery_tasks.judge_run_enqueue(run_id=run_id, n=n)

        run_enqueue_register(enqueue)
