from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("studies", "0004_membership_metadata"),
    ]

    operations = [
        migrations.AddField(
            model_name="criterion",
            name="needs_context",
            field=models.BooleanField(default=False),
        ),
    ]
