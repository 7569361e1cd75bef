# frozen_string_literal: true

require "rails/generators"
require "rails/generators/active_record"

module Ojs
  module Generators
    # `rails g ojs:install`: an initializer with OJS.configure and a migration that creates
    # the outbox table with the core's DDL (OJS::Migration.create_outbox_table).
    class InstallGenerator < ::Rails::Generators::Base
      include ::Rails::Generators::Migration

      source_root File.expand_path("templates", __dir__)

      def self.next_migration_number(dirname)
        ::ActiveRecord::Generators::Base.next_migration_number(dirname)
      end

      def create_initializer
        template "initializer.rb", "config/initializers/ojs.rb"
      end

      def create_migration_file
        migration_template "migration.rb", "db/migrate/create_ojs_outbox.rb",
                           migration_version: migration_version
      end

      private

      def migration_version
        "[#{::ActiveRecord::VERSION::MAJOR}.#{::ActiveRecord::VERSION::MINOR}]"
      end
    end
  end
end
