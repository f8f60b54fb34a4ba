"""TrajectoryDay counts what the agent reports apart from what the platform observes: each has
its own daily bounds, so reports never crowd out the platform's events. Days counted before
this keep their totals under the platform's columns."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0009_agent_cluster_account_link"),
    ]

    operations = [
        migrations.AddField(
            model_name="trajectoryday",
            name="reported_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="trajectoryday",
            name="reported_events",
            field=models.PositiveIntegerField(
                default=0, help_text="reported by the agent, and the API's records of those calls"
            ),
        ),
        migrations.AlterField(
            model_name="trajectoryday",
            name="bytes",
            field=models.PositiveBigIntegerField(default=0, help_text="observed by the platform"),
        ),
        migrations.AlterField(
            model_name="trajectoryday",
            name="events",
            field=models.PositiveIntegerField(default=0, help_text="observed by the platform"),
        ),
    ]
