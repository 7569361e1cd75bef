# frozen_string_literal: true

# The OJS outbox table, created with the adapter's DDL for this database (PostgreSQL, MySQL/MariaDB
# or SQLite).
# db/schema.rb records it as a call to OJS::Migration.create_outbox_table, not as ActiveRecord's
# `create_table` (which would lose its defaults, UNIQUE, CHECK and TIMESTAMPTZ columns), so a
# database built with `db:schema:load` gets the same table as one built by this migration.
class CreateOjsOutbox < ActiveRecord::Migration<%= migration_version %>
  def up
    OJS::Migration.create_outbox_table(connection)
  end

  def down
    OJS::Migration.drop_outbox_table(connection)
  end
end
