# frozen_string_literal: true

# The OJS outbox table, created with the adapter's DDL for this database (PostgreSQL or SQLite).
class CreateOjsOutbox < ActiveRecord::Migration<%= migration_version %>
  def up
    OJS::Migration.create_outbox_table(connection)
  end

  def down
    OJS::Migration.drop_outbox_table(connection)
  end
end
