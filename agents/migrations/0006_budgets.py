
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_compaction'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='agentprofile',
            name='daily_cost_cap',
            field=models.DecimalField(blank=True, decimal_places=6, help_text='What all runs of this profile may cost per UTC day.', max_digits=14, null=True),
        ),
        migrations.AddField(
            model_name='agentprofile',
            name='max_cost_per_run',
            field=models.DecimalField(blank=True, decimal_places=6, help_text='In the price currency.', max_digits=14, null=True),
        ),
        migrations.AddField(
            model_name='agentprofile',
            name='max_tokens_per_run',
            field=models.PositiveIntegerField(blank=True, help_text='Input plus output tokens of all model calls of a run.', null=True),
        ),
        migrations.AlterField(
            model_name='run',
            name='status',
            field=models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('waiting', 'Waiting for input'), ('completed', 'Completed'), ('failed', 'Failed'), ('cancelled', 'Cancelled'), ('interrupted', 'Interrupted'), ('budget_exceeded', 'Budget exceeded')], default='queued', max_length=20),
        ),
        migrations.CreateModel(
            name='UserBudget',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('daily_cost_cap', models.DecimalField(blank=True, decimal_places=6, help_text='Per UTC day.', max_digits=14, null=True)),
                ('monthly_cost_cap', models.DecimalField(blank=True, decimal_places=6, help_text='Per UTC month.', max_digits=14, null=True)),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='budget', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.CreateModel(
            name='BudgetCharge',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('call_id', models.CharField(max_length=80)),
                ('amount', models.DecimalField(decimal_places=10, default=0, max_digits=20)),
                ('settled', models.BooleanField(default=False)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('profile', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='agents.agentprofile')),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='budget_charges', to='agents.run')),
                ('user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['user', 'created_at'], name='agents_budg_user_id_a778b8_idx'), models.Index(fields=['profile', 'created_at'], name='agents_budg_profile_124cd4_idx')],
                'constraints': [models.UniqueConstraint(fields=('run', 'call_id'), name='budget_charge_call_unique')],
            },
        ),
    ]
