from django.apps import AppConfig


class GenerationAppConfig(AppConfig):
    name = "generation"
    verbose_name = "Candidate runs"
    default_auto_field = "django.db.models.BigAutoField"
