# frozen_string_literal: true

module OJS
  # Creates the outbox table on an ActiveRecord connection with the core's DDL for that
  # connection's dialect (idempotent: IF NOT EXISTS throughout). The generated Rails migration
  # (`rails g ojs:install`) calls this, and so does db/schema.rb (OJS::SchemaDumper writes the
  # outbox table as this call, because ActiveRecord's schema DSL cannot express the core's DDL).
  module Migration
    module_function

    # `table`: the name the caller expects (schema.rb records the name it dumped); refused when
    # it is not the configured outbox table, since the core's DDL is for that one.
    # `force: true` drops a table of that name first (what `create_table force: :cascade` does
    # in schema.rb), so loading a schema replaces an outbox table of another shape.
    def create_outbox_table(connection = OJS.configuration.connection_class.connection, table: nil, force: false)
      name = OJS.client.table_name
      if table && table.to_s != name
        raise OJS::InvalidConfig.new(
          "the schema names the outbox table #{table.to_s.inspect} but the configured outbox_table is " \
          "#{name.inspect}; set config.outbox_table = #{table.to_s.inspect} or dump the schema again",
          field: "adapter.outbox.table_name"
        )
      end
      connection.drop_table(name, if_exists: true, force: :cascade) if force
      OJS.client.create_table_sql(connection).each { |statement| connection.execute(statement) }
      name
    end

    # Drops the outbox table (the migration's `down`), through ActiveRecord's schema API.
    def drop_outbox_table(connection = OJS.configuration.connection_class.connection)
      connection.drop_table(OJS.client.table_name, if_exists: true)
    end
  end
end
