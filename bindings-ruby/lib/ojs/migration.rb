# frozen_string_literal: true

module OJS
  # Creates the outbox table on an ActiveRecord connection with the core's DDL for that
  # connection's dialect (idempotent: IF NOT EXISTS throughout). The generated Rails migration
  # (`rails g ojs:install`) calls this.
  module Migration
    module_function

    def create_outbox_table(connection = OJS.configuration.connection_class.connection)
      OJS.adapter.create_table_sql(connection).each { |statement| connection.execute(statement) }
      OJS.adapter.table_name
    end

    # Drops the outbox table (the migration's `down`), through ActiveRecord's schema API.
    def drop_outbox_table(connection = OJS.configuration.connection_class.connection)
      connection.drop_table(OJS.adapter.table_name, if_exists: true)
    end
  end
end
