from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leaderboard", "0004_snapshot_category_dedup"),
    ]

    operations = [
        migrations.AddField(
            model_name="refitlease",
            name="inputs_generation",
            field=models.PositiveBigIntegerField(default=0),
        ),
    ]
