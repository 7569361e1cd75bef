# frozen_string_literal: true

module OJS
  # Makes db/schema.rb (Rails' default `schema_format :ruby`) hold the outbox table faithfully.
  #
  # ActiveRecord's dumper describes a table in its own DSL (`create_table ... t.integer ...`),
  # which cannot say what the core's DDL says: on SQLite the millisecond `DEFAULT (CAST(...))`
  # expressions become `default: 0`, and `UNIQUE(job_id)` and the status `CHECK` are dropped; on
  # PostgreSQL `TIMESTAMPTZ` becomes `timestamp`, and the fillfactor is lost. A database loaded
  # from that schema.rb (every test database, CI, a new laptop) then has a different table, and
  # on SQLite every row looks 56 years old.
  #
  # So the dumper writes the outbox table as a call to the same code the migration runs,
  # `OJS::Migration.create_outbox_table(connection, table: "...", force: true)`: `db:schema:load`
  # re-runs the core's DDL (dropping a table of the same name first, like `create_table
  # force: :cascade` does for the others). Every other table is dumped by ActiveRecord as usual.
  # The table recognised is the configured `outbox_table` (OJS.configure, in the initializer).
  module SchemaDumper
    # One call in schema.rb, in the place ActiveRecord's `create_table` would have been.
    def self.statement(table)
      <<~RUBY
        # #{table}: the OJS outbox table, created with ojs-adapter-rails' own DDL (its Rust core's),
        # which ActiveRecord's schema DSL cannot express (millisecond defaults, UNIQUE, CHECK,
        # TIMESTAMPTZ). See docs/rails.md, "The outbox table and db/schema.rb".
        OJS::Migration.create_outbox_table(connection, table: #{table.inspect}, force: true)

      RUBY
    end

    private

    def table(table, stream)
      return super unless table == OJS.client.table_name

      stream.print(OJS::SchemaDumper.statement(table).gsub(/^(?=.)/, "  "))
      stream
    end
  end
end

ActiveRecord::SchemaDumper.prepend(OJS::SchemaDumper)
