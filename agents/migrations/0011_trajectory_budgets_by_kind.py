"""TrajectoryDay counts each budget apart (model calls, the platform harness's tool calls, the
API's records of calls, the agent's reports), with its drops: the API's records are the agent's
to size and multiply, and they shared the observed budget with the model and tool calls. A day
counted before this keeps its totals; its budgets start at zero."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0010_trajectory_report_budget"),
    ]

    operations = [
        migrations.AddField(
            model_name="trajectoryday",
            name="api_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="api_dropped",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="api_events",
            field=models.PositiveIntegerField(default=0, help_text="records of agent API calls"),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="model_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="model_dropped",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="model_events",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="reported_dropped",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="tool_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="tool_dropped",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="tool_events",
            field=models.PositiveIntegerField(default=0, help_text="run by the platform harness"),
        ),
        migrations.AlterField(
            model_name="trajectoryday",
            name="dropped",
            field=models.PositiveIntegerField(default=0, help_text="all budgets together"),
        ),
    ]
