# frozen_string_literal: true

# Operator commands over the core's relay and dead-letter store, with the app's OJS settings:
# the core's commands (`Bridge::admin`, the same rules and words as `ojs-relay status | dead
# ...`), printed as they are.
require_relative "../relay_command"
require_relative "../work_command"

# As early as this gem gets control in a run of ojs:relay: before :environment loads the
# application, so a SIGINT/SIGTERM during start-up still ends the command with status 0.
OJS::RelayCommand.arm if OJS::RelayCommand.invoked?(Rake.application)
OJS::WorkCommand.arm if OJS::WorkCommand.invoked?(Rake.application)
# Before the application's initializer configures OJS: a run of tasks that never talk to the
# backend (ojs:status, ojs:dead:*, db:migrate, ...) needs no backend URL, also in production.
OJS.needs_backend = false if OJS::RelayCommand.backend_free?(Rake.application)

namespace :ojs do
  desc "Run the outbox relay in this process until SIGINT/SIGTERM (pair with config.relay = :external)"
  task relay: :environment do
    OJS::RelayCommand.run
  end

  desc "Run jobs (ActiveJob jobs, OJS.handle handlers) until SIGINT/SIGTERM: QUEUES=default,email CONCURRENCY=5"
  task work: :environment do
    OJS::WorkCommand.run
  end

  desc "Print the outbox status (counts by status, oldest pending age, lag) as JSON"
  task status: :environment do
    OJS::RelayCommand.admin(command: "status", json: true)
  end

  namespace :dead do
    desc "List dead rows, oldest first, as JSON: rake ojs:dead:list[tenant,limit]"
    task :list, %i[tenant limit] => :environment do |_task, args|
      limit = args[:limit].to_s.empty? ? nil : Integer(args[:limit])
      OJS::RelayCommand.admin(command: "dead", action: "list", tenant: args[:tenant], limit: limit, json: true)
    end

    desc "Make dead rows due again with fresh attempts: rake ojs:dead:replay[tenant]"
    task :replay, %i[tenant] => :environment do |_task, args|
      OJS::RelayCommand.admin(command: "dead", action: "replay", tenant: args[:tenant])
    end

    desc "Delete dead rows (confirm with YES=1, the core's --yes): rake ojs:dead:purge[tenant] YES=1"
    task :purge, %i[tenant] => :environment do |_task, args|
      OJS::RelayCommand.admin(command: "dead", action: "purge", tenant: args[:tenant], yes: ENV["YES"] == "1")
    end
  end
end
