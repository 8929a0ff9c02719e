from django.apps import AppConfig


class GenerationAppConfig(AppConfig):
    name = "generation"
    verbose_name = "Candidate runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The run services queue a candidate's batch task through the task module, which
        # imports them; it is handed in here instead (looked up on each call).
        from . import celery_tasks
        from .runs import run_enqueue_register

        def enqueue(run_id: int, config_id: int) -> None:
            celery_tasks.generation_enqueue(run_id=run_id, config_id=config_id)

        run_enqueue_register(enqueue)
