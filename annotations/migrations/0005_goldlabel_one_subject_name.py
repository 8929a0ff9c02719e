"""A gold label's one-subject check takes the name every subject model's check has
(`<model>_one_subject`, from `studies.models.OutputOrComparison`); the condition is unchanged."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("annotations", "0004_invitations_and_password_change"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="goldlabel", name="gold_one_subject"),
        migrations.AddConstraint(
            model_name="goldlabel",
            constraint=models.CheckConstraint(
                condition=models.Q(output__isnull=False, comparison__isnull=True)
                | models.Q(output__isnull=True, comparison__isnull=False),
                name="goldlabel_one_subject",
            ),
        ),
    ]
