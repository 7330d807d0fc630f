import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0002_host_lease_and_partial_text"),
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
