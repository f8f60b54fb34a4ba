# The benchmarks and arena settings a competition file declares (issue 15, item 6).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("competition", "0003_competition_agents"),
    ]

    operations = [
        migrations.AddField(
            model_name="competition",
            name="benchmarks",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="the registry's benchmarks it evaluates; empty: all",
            ),
        ),
        migrations.AddField(
            model_name="competition",
            name="arena_settings",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="arena settings it overrides (`arena_settings_current`); the rest: settings.py",
            ),
        ),
    ]
