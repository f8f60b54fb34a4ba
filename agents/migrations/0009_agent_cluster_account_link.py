"""Agent.cluster_account: from the Slurm account's name (looked up again wherever it was
needed) to a foreign key to the account row. Existing agents are linked by that name; a name
no account row carries leaves the link empty (reported, never guessed)."""

import django.db.models.deletion
from django.db import migrations, models


def link_by_name(apps, schema_editor):
    Agent = apps.get_model("agents", "Agent")
    ClusterAccount = apps.get_model("cluster", "ClusterAccount")
    accounts = dict(ClusterAccount.objects.values_list("name", "pk"))
    for agent in Agent.objects.exclude(cluster_account_name=""):
        account_id = accounts.get(agent.cluster_account_name)
        if account_id is None:
            print(f"\n  agent {agent.name}: no cluster account {agent.cluster_account_name!r}")
            continue
        Agent.objects.filter(pk=agent.pk).update(cluster_account_id=account_id)


def name_from_link(apps, schema_editor):
    Agent = apps.get_model("agents", "Agent")
    for agent in Agent.objects.exclude(cluster_account=None).select_related("cluster_account"):
        Agent.objects.filter(pk=agent.pk).update(
            cluster_account_name=agent.cluster_account.name
        )


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0008_scaffold_budget"),
        ("cluster", "0002_account_platform_storage"),
    ]

    operations = [
        migrations.RenameField(
            model_name="agent", old_name="cluster_account", new_name="cluster_account_name"
        ),
        migrations.AddField(
            model_name="agent",
            name="cluster_account",
            field=models.ForeignKey(
                blank=True,
                help_text="the Slurm account",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="cluster.clusteraccount",
            ),
        ),
        migrations.RunPython(link_by_name, name_from_link),
        migrations.RemoveField(model_name="agent", name="cluster_account_name"),
    ]
