import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_session_pin_archive"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="summarized_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="summarizes",
                to="agents.message",
            ),
        ),
    ]
