# frozen_string_literal: true

# Issue 11, item 1: the outbox table survives Rails' default `schema_format :ruby`. A real app
# (the example app) runs `rails g ojs:install`, the real `db:migrate` and `db:schema:dump`;
# `db:schema:load` then builds a FRESH database from db/schema.rb alone, as a test database, CI
# or a new laptop gets it. The loaded table must be the core's: compared with a table made by
# the core's DDL directly (columns, types, nullability, defaults, indexes with their WHERE
# clauses, the UNIQUE(job_id) and the status CHECK, on PostgreSQL the fillfactor, on MariaDB
# also the event log and locks table the core's DDL creates beside it), the
# constraints must hold (a duplicate job_id and an unknown status are refused), and a row
# staged right after must be young (`oldest_pending_age_ms`), not 56 years old.

require_relative "test_helper"
require "open3"

class SchemaDumpTest < Minitest::Test
  EXAMPLE = File.join(TestSupport::ROOT, "bindings-ruby", "example")
  TABLE = "ojs_outbox" # the generator's default

  def setup
    @app = File.join(TestSupport::TMP, "schema_app")
    FileUtils.rm_rf(@app)
    FileUtils.cp_r(EXAMPLE, @app)
    @base_env = {
      "OJS_URL" => TestSupport.devserver.url,
      "RAILS_ENV" => "development",
      "SKIP_TEST_DATABASE" => "1" # the database named here only, not also the test one
    }
  end

  def rails(env, *args)
    output, status = Open3.capture2e(@base_env.merge(env), RbConfig.ruby, "bin/rails", *args, chdir: @app)
    assert status.success?, "bin/rails #{args.join(' ')} failed:\n#{output}"
    output
  end

  # --- the databases ---------------------------------------------------------------------

  def sqlite_env(name)
    path = File.join(@app, "db", "#{name}.sqlite3")
    FileUtils.rm_f(path)
    { "EXAMPLE_SQLITE_PATH" => path }
  end

  # A new, empty PostgreSQL database per role (source, loaded, reference) and Rails version.
  def postgres_env(name)
    database = "ojs_rb_schema_#{name}_#{TestSupport::RAILS.delete('.')}"
    base = URI(ENV.fetch("OJS_TEST_DATABASE_URL"))
    ActiveRecord::Base.establish_connection(base.to_s)
    ActiveRecord::Base.connection.execute("DROP DATABASE IF EXISTS #{database}")
    ActiveRecord::Base.connection.execute("CREATE DATABASE #{database}")
    ActiveRecord::Base.remove_connection
    base.path = "/#{database}"
    { "DATABASE_URL" => base.to_s }
  end

  # A new, empty MariaDB database per role and Rails version, reached through mysql2.
  def mariadb_env(name)
    database = "ojs_rb_schema_#{name}_#{TestSupport::RAILS.delete('.')}"
    ActiveRecord::Base.establish_connection(TestSupport.mysql_url)
    ActiveRecord::Base.connection.execute("DROP DATABASE IF EXISTS #{database}")
    ActiveRecord::Base.connection.execute("CREATE DATABASE #{database}")
    ActiveRecord::Base.remove_connection
    url = URI(TestSupport.mysql_url)
    url.path = "/#{database}"
    { "DATABASE_URL" => url.to_s }
  end

  def env_for(kind, name)
    case kind
    when :sqlite then sqlite_env(name)
    when :postgres then postgres_env(name)
    when :mariadb then mariadb_env(name)
    end
  end

  def connect(kind, env)
    ActiveRecord::Base.remove_connection if ActiveRecord::Base.connected?
    if kind == :sqlite
      ActiveRecord::Base.establish_connection(adapter: "sqlite3", database: env.fetch("EXAMPLE_SQLITE_PATH"))
    else
      ActiveRecord::Base.establish_connection(env.fetch("DATABASE_URL"))
    end
    ActiveRecord::Base.connection
  end

  # --- what a table is, read from the database's catalog -----------------------------------

  def describe(kind, env)
    connection = connect(kind, env)
    case kind
    when :sqlite then describe_sqlite(connection)
    when :postgres then describe_postgres(connection)
    when :mariadb then describe_mariadb(connection)
    end
  ensure
    ActiveRecord::Base.remove_connection
  end

  def describe_sqlite(connection)
    columns = connection.select_rows("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('#{TABLE}')")
    indexes = connection.select_rows("SELECT name, \"unique\", origin, partial FROM pragma_index_list('#{TABLE}')").map do |name, unique, origin, partial|
      indexed = connection.select_values("SELECT name FROM pragma_index_info('#{name}') ORDER BY seqno")
      sql = connection.select_value("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = '#{name}'")
      # Constraint indexes (origin "u") are named by SQLite itself; compare what they index.
      [origin == "u" ? "(unique constraint)" : name, unique, origin, partial, indexed, sql.to_s[/ WHERE .*\z/m]]
    end
    table_sql = connection.select_value("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '#{TABLE}'")
    checks = table_sql.scan(/CHECK\s*\((?:[^()]|\([^()]*\))*\)/i)
    { columns: columns, indexes: indexes.sort_by { |index| index[0] }, checks: checks }
  end

  def describe_postgres(connection)
    columns = connection.select_rows(<<~SQL)
      SELECT column_name, data_type, is_nullable, column_default
      FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = '#{TABLE}'
      ORDER BY ordinal_position
    SQL
    constraints = connection.select_rows(<<~SQL).sort
      SELECT contype, pg_get_constraintdef(c.oid) FROM pg_constraint c
      WHERE conrelid = '#{TABLE}'::regclass
    SQL
    indexes = connection.select_rows(<<~SQL).sort
      SELECT indexname, regexp_replace(indexdef, '^CREATE (UNIQUE )?INDEX \\S+', 'CREATE \\1INDEX') FROM pg_indexes
      WHERE schemaname = current_schema() AND tablename = '#{TABLE}'
        AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = '#{TABLE}'::regclass)
    SQL
    options = connection.select_value("SELECT reloptions::text FROM pg_class WHERE oid = '#{TABLE}'::regclass")
    { columns: columns, constraints: constraints, indexes: indexes, reloptions: options }
  end

  # MariaDB: the outbox table and the two the core's DDL creates beside it (its event log and
  # its locks table; ActiveRecord dumps those two as ordinary tables): every column with its
  # type, default, generation expression and collation, every index, the CHECK constraints,
  # and each table's engine and collation.
  def describe_mariadb(connection)
    tables = [TABLE, "#{TABLE}_events", "#{TABLE}_locks"]
    list = tables.map { |table| connection.quote(table) }.join(", ")
    where = "table_schema = DATABASE() AND table_name IN (#{list})"
    {
      tables: connection.select_rows(<<~SQL),
        SELECT table_name, engine, table_collation, create_options FROM information_schema.tables
        WHERE #{where} ORDER BY table_name
      SQL
      columns: connection.select_rows(<<~SQL),
        SELECT table_name, column_name, column_type, is_nullable, column_default, extra,
               generation_expression, character_set_name, collation_name
        FROM information_schema.columns WHERE #{where} ORDER BY table_name, ordinal_position
      SQL
      indexes: connection.select_rows(<<~SQL),
        SELECT table_name, index_name, non_unique, seq_in_index, column_name, sub_part, index_type
        FROM information_schema.statistics WHERE #{where} ORDER BY table_name, index_name, seq_in_index
      SQL
      checks: connection.select_rows(<<~SQL)
        SELECT table_name, constraint_name, check_clause FROM information_schema.check_constraints
        WHERE constraint_schema = DATABASE() AND table_name IN (#{list}) ORDER BY table_name, constraint_name
      SQL
    }
  end

  # The reference: the table made by the core's DDL itself, in a fresh database.
  def reference(kind)
    env = env_for(kind, "reference")
    connect(kind, env)
    OJS.configure do |config|
      config.url = TestSupport.devserver.url
      config.outbox_table = TABLE
      config.auto_start = false
    end
    OJS::Migration.create_outbox_table
    describe(kind, env)
  end

  # The constraints hold on the loaded table: a duplicate job_id and an unknown status refused.
  def assert_constraints_hold(kind, env)
    connection = connect(kind, env)
    id = "0190b5c4-0000-7000-8000-000000000001"
    insert = lambda do |job_id, status|
      connection.execute("INSERT INTO #{TABLE} (job_id, job_type, job_args, status) " \
                         "VALUES ('#{job_id}', 'schema.check', '[]', '#{status}')")
    end
    insert.call(id, "pending")
    assert_raises(ActiveRecord::RecordNotUnique, "UNIQUE(job_id) holds") { insert.call(id, "pending") }
    assert_raises(ActiveRecord::StatementInvalid, "the status CHECK holds") do
      insert.call("0190b5c4-0000-7000-8000-000000000002", "bogus")
    end
    connection.execute("DELETE FROM #{TABLE}")
  ensure
    ActiveRecord::Base.remove_connection
  end

  TestSupport.databases.each do |kind|
    define_method("test_#{kind}_outbox_table_round_trips_through_schema_rb") do
      expected = reference(kind)
      source = env_for(kind, "source")
      loaded = env_for(kind, "loaded")

      rails(source, "generate", "ojs:install")
      initializer = File.join(@app, "config/initializers/ojs.rb")
      File.write(initializer, File.read(initializer).sub("# config.relay = :external", "config.relay = :external"))
      rails(source, "db:migrate")
      assert_equal expected, describe(kind, source), "the migration makes the core's table"

      schema = File.join(@app, "db", "schema.rb")
      FileUtils.rm_f(schema)
      rails(source, "db:schema:dump")
      assert File.exist?(schema), "db:schema:dump writes db/schema.rb (schema_format :ruby, Rails' default)"

      rails(loaded, "db:schema:load")
      assert_equal expected, describe(kind, loaded),
                   "the table built from db/schema.rb is the core's table\n--- db/schema.rb:\n#{File.read(schema)}"
      assert_constraints_hold(kind, loaded)

      # A row staged right after, in the loaded database: its age is the time since staging.
      output = rails(loaded, "runner", <<~RUBY)
        OJS.enqueue_after_commit("schema.check", [1])
        puts "age_ms=\#{OJS.status.fetch("oldest_pending_age_ms")} pending=\#{OJS.status.fetch("pending")}"
      RUBY
      age = output[/age_ms=(-?\d+)/, 1]&.to_i
      assert age, "ojs:status answered:\n#{output}"
      assert_match(/pending=1/, output)
      assert_operator age, :>=, 0
      assert_operator age, :<, TestSupport::PATIENCE * 1000, "a row staged just now has a lag near 0, not decades"
    end
  end
end
