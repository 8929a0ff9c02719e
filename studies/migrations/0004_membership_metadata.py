from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0003_membership_created_account"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="metadata",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
