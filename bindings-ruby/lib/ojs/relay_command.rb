# frozen_string_literal: true

require "json"
require "shellwords"

module OJS
  # `rake ojs:relay` (or `bin/rails ojs:relay`): the standalone relay as the process's only job,
  # stopped by SIGINT or SIGTERM with exit status 0 whenever the signal arrives, also while the
  # process is still starting (the Rails environment loading, or loaded but the relay not yet
  # running).
  #
  # Options: those of `ojs-relay run` (`--listen ADDR --token T`, `--poll-interval`, ...),
  # parsed by the core over the app's OJS settings (`OJS.configure`), which they override. Rake
  # takes no flags, so they come after `--` (`bin/rails ojs:relay -- --listen 127.0.0.1:9464`),
  # or, without `--`, from OJS_RELAY_ARGS (split as a shell would). `-- --help` prints them.
  #
  # How: when ojs.rake is loaded for a run of ojs:relay (before the :environment task loads the
  # application), Ruby traps that only remember the signal are installed, then the core's
  # handlers (`OJS.arm_stop_signals`, chained to those traps). A signal before the relay runs is
  # seen by one or the other; once it runs the core waits for the signal itself and flushes.
  # Before this file is loaded (Ruby and the Rails framework booting) nothing of this gem runs:
  # a signal then ends the process the way Ruby's default handler does.
  module RelayCommand
    TASK = "ojs:relay"
    SIGNALS = %w[INT TERM].freeze
    # The tasks that never talk to the OJS backend: the operator commands (they read and write
    # the outbox table through the relay's database connection) and ActiveRecord's database
    # tasks (migrations, schema, create/drop, seeds). A run of nothing but these needs no backend URL
    # (`config::Host::needs_backend`); a job staged meanwhile waits in the outbox.
    BACKEND_FREE = [/\Aojs:status\z/, /\Aojs:dead:(list|replay|purge)\z/, /\Adb:/].freeze

    class << self
      # Whether `application` (a Rake application) was asked to run ojs:relay.
      def invoked?(application)
        task_names(application).include?(TASK)
      end

      # Whether every task `application` was asked to run is BACKEND_FREE (none asked: the
      # default task, which may be anything: no).
      def backend_free?(application)
        names = task_names(application)
        !names.empty? && names.all? { |name| BACKEND_FREE.any? { |pattern| pattern.match?(name) } }
      end

      def stop_requested?
        @stop_requested == true
      end

      # Installs the traps and arms the core's handlers, once; says so on stdout (the first
      # line of the command: from then on a signal stops it gracefully).
      def arm
        return if @armed

        @armed = true
        @stop_requested = false
        SIGNALS.each { |signal| trap(signal) { @stop_requested = true } }
        OJS.arm_stop_signals
        say("ojs:relay: starting; SIGINT or SIGTERM stops it")
      end

      # The task's body, once the environment is loaded. Ends the process (exit) when the
      # options came after `--`: rake would take each of them for a task to run next.
      def run(argv = ARGV, env = ENV)
        code = run_command(argv, env)
        exit(code) if code != 0 || argv.include?("--")
      end

      # The relay's options: what follows the first `--` of the command line, else
      # OJS_RELAY_ARGS split as a shell would.
      def relay_args(argv = ARGV, env = ENV)
        at = argv.index("--")
        return argv[(at + 1)..] if at

        Shellwords.split(env.fetch("OJS_RELAY_ARGS", ""))
      end

      # This command as the core's relay command line sees it: its name, the app's settings
      # (the base the options override), how to create a missing table.
      def framework(program)
        configuration = OJS.configuration
        {
          "program" => program,
          "config" => configuration.to_core_json,
          "development" => configuration.development?,
          "url_setting" => Configuration::URL_SETTING,
          "create_table_with" => Client::CREATE_TABLE_WITH,
          "after_help" => "Rake takes no flags: pass these after `--`, or in OJS_RELAY_ARGS (split as a shell would)."
        }
      end

      # An operator command of the rake tasks (`ojs:status`, `ojs:dead:*`): the core runs it
      # (OJS.admin) and says what to print; its stdout and stderr are printed unchanged and a
      # non-zero exit code ends the task with it. The confirmation of a purge is `YES=1` here
      # (rake takes no --yes): a refused purge says so after the core's words.
      def admin(command)
        report = OJS.admin(command)
        $stdout.write(report.stdout)
        $stdout.flush
        $stderr.write(report.stderr)
        if report.exit_code != 0 && command[:action] == "purge" && !command[:yes]
          $stderr.puts("ojs:dead:purge: confirm with YES=1 (rake's spelling of --yes)")
        end
        $stderr.flush
        exit(report.exit_code) unless report.exit_code.zero?
      end

      private

      # Runs the command line; returns the exit code.
      def run_command(argv, env)
        arm
        args = relay_args(argv, env)
        program = "#{Rake.application.name == 'rails' ? 'bin/rails' : 'rake'} #{TASK} --"
        if stop_requested? && !(args.include?("--help") || args.include?("-h"))
          say("ojs:relay: stopped before the relay started")
          return 0
        end
        framework = JSON.generate(self.framework(program))
        check = Native.relay_command_check(args, framework)
        if check.exit
          # --help, or a usage error (exit 2): the core's words as they are.
          $stdout.write(check.exit.stdout)
          $stdout.flush
          $stderr.write(check.exit.stderr)
          $stderr.flush
          return check.exit.exit_code
        end
        if stop_requested?
          say("ojs:relay: stopped before the relay started")
          return 0
        end
        say("ojs:relay: running for table #{check.table}")
        # The relay's records (its start line, the --listen address, pauses, dead letters) go
        # to OJS.logger; when that does not write to the terminal (Rails logs to
        # log/<env>.log) they are printed on stderr too.
        report = if RelayLog.console?(OJS.logger)
                   relay_until_signal(args, framework)
                 else
                   RelayLog.echo("ojs:relay") { relay_until_signal(args, framework) }
                 end
        say("ojs:relay: stopped")
        report.exit_code
      rescue OJS::Error => e
        $stderr.puts("error [#{e.code}]: #{e.message}")
        $stderr.flush
        Native.relay_exit_code(e.code.to_s)
      end

      def relay_until_signal(args, framework)
        RelayLog.start
        Native.relay_command(args, framework)
      ensure
        RelayLog.forward
      end

      # The top-level task names, without their arguments ("ojs:dead:list[t1,5]" => "ojs:dead:list").
      def task_names(application)
        application.top_level_tasks.map { |task| task.sub(/\[.*\z/m, "") }
      end

      def say(line)
        $stdout.puts(line)
        $stdout.flush
      end
    end
  end
end
