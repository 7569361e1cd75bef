# frozen_string_literal: true

# Operator commands over the core's relay and dead-letter store, with the app's OJS settings
# (the same engine as `ojs-relay run | status | dead ...`).
require_relative "../relay_command"

# As early as this gem gets control in a run of ojs:relay: before :environment loads the
# application, so a SIGINT/SIGTERM during start-up still ends the command with status 0.
OJS::RelayCommand.arm if OJS::RelayCommand.invoked?(Rake.application)

namespace :ojs do
  desc "Run the outbox relay in this process until SIGINT/SIGTERM (pair with config.relay = :external)"
  task relay: :environment do
    OJS::RelayCommand.run
  end

  desc "Print the outbox status (counts by status, oldest pending age, lag) as JSON"
  task status: :environment do
    puts JSON.pretty_generate(OJS.status)
  end

  namespace :dead do
    desc "List dead rows, oldest first: rake ojs:dead:list[tenant,limit]"
    task :list, %i[tenant limit] => :environment do |_task, args|
      rows = OJS.dead_list(tenant: args[:tenant].to_s.empty? ? nil : args[:tenant],
                           limit: args[:limit]&.to_i)
      puts JSON.pretty_generate(rows)
    end

    desc "Make dead rows due again with fresh attempts: rake ojs:dead:replay[tenant]"
    task :replay, %i[tenant] => :environment do |_task, args|
      count = OJS.dead_replay(tenant: args[:tenant].to_s.empty? ? nil : args[:tenant])
      puts "replayed #{count} dead row(s)"
    end

    desc "Delete dead rows (needs YES=1): rake ojs:dead:purge[tenant] YES=1"
    task :purge, %i[tenant] => :environment do |_task, args|
      abort "ojs:dead:purge deletes jobs for good; run it again with YES=1" unless ENV["YES"] == "1"
      count = OJS.dead_purge(tenant: args[:tenant].to_s.empty? ? nil : args[:tenant])
      puts "purged #{count} dead row(s)"
    end
  end
end
