from django.apps import AppConfig


class JudgesConfig(AppConfig):
    name = "judges"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Models are importable only once the registry is ready, hence the imports here.
        from studies.services import rubric_use_register

        from .selectors import rubric_referenced

        rubric_use_register("judges", rubric_referenced)
