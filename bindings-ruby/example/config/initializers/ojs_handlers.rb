# frozen_string_literal: true

# The handlers of the plain jobs this app stages with OJS.enqueue_after_commit, run by
# `bin/rails ojs:work` (ActiveJob jobs need none: the worker runs them through ActiveJob).
# Each runs inside Rails' reloader, so `User` is the current class in development too.
OJS.handle("email.welcome") do |args, _job|
  user = User.find(args.first)
  # A real app delivers the mail here: UserMailer.welcome(user).deliver_now
  $stdout.puts("welcome email sent to #{user.email}")
  $stdout.flush
  { "sent_to" => user.email }
end
