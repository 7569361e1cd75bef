"""Creates the outbox table with the core's DDL for this database's vendor; the table name
comes from OJS_CONFIG (``outbox.table_name``). Reversible: the reverse step drops the table
with the core's statement."""

from django.db import migrations


def create_outbox_table(apps, schema_editor):
    from ojs_adapter_django.facade import ojs

    connection = schema_editor.connection
    ojs.create_outbox_table(connection.alias, connection=connection)


def drop_outbox_table(apps, schema_editor):
    from ojs_adapter_django.facade import ojs

    connection = schema_editor.connection
    ojs.drop_outbox_table(connection.alias, connection=connection)


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [migrations.RunPython(create_outbox_table, drop_outbox_table, elidable=False)]
