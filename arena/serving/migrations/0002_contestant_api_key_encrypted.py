"""Model servers' keys are stored encrypted (arena/encryption.py); rows written before are
encrypted here. Going back writes them in clear again."""

from django.db import migrations

import arena.encryption


def encrypt_existing(apps, schema_editor):
    Contestant = apps.get_model("serving", "Contestant")
    # Reading returns a row written before in clear as it is; saving encrypts it.
    for pk, api_key in Contestant.objects.exclude(api_key="").values_list("pk", "api_key"):
        Contestant.objects.filter(pk=pk).update(api_key=api_key)


def decrypt_existing(apps, schema_editor):
    Contestant = apps.get_model("serving", "Contestant")
    table = schema_editor.quote_name(Contestant._meta.db_table)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, api_key FROM {table} WHERE api_key <> ''")
        for pk, stored in cursor.fetchall():
            clear = arena.encryption.secret_decrypt(stored)
            cursor.execute(f"UPDATE {table} SET api_key = %s WHERE id = %s", [clear, pk])


class Migration(migrations.Migration):
    dependencies = [("serving", "0001_initial")]

    operations = [
        migrations.AlterField(
            model_name="contestant",
            name="api_key",
            field=arena.encryption.EncryptedTextField(blank=True, help_text="Bearer token, if any"),
        ),
        migrations.RunPython(encrypt_existing, decrypt_existing),
    ]
