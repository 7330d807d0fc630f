from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0006_budgets"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="kind",
            field=models.CharField(
                choices=[("answer", "Answer"), ("compaction", "Compaction")],
                default="answer",
                max_length=12,
            ),
        ),
    ]
