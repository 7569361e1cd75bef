# frozen_string_literal: true

# Drives the app end to end through its whole Rack stack (bin/rails runner script/signup_demo.rb):
# one signup that commits, one that rolls back after staging its job, one refused by validation.
# Then asks the OJS backend (OJS_URL, the devserver) what it received: only the committed job.
require "rack/mock"
require "net/http"
require "json"

backend = URI(ENV.fetch("OJS_URL"))
def backend_jobs(backend)
  JSON.parse(Net::HTTP.get(URI.join(backend.to_s, "/_dev/received")))["jobs"]
end

def post(path, params, headers = {})
  env = { "CONTENT_TYPE" => "application/json", :input => JSON.generate(params) }
  headers.each { |name, value| env["HTTP_#{name.upcase.tr('-', '_')}"] = value }
  response = Rack::MockRequest.new(Rails.application).post(path, env)
  puts "POST #{path} #{params.to_json} -> #{response.status} #{response.body}"
  response
end

committed_at = nil
ok = post("/signup", { email: "ada@example.com" }, "X-Request-ID" => "demo-req-1")
committed_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
post("/signup", { email: "bob@example.com", fail_after_enqueue: true }, "X-Request-ID" => "demo-req-2")
post("/signup", { email: "not-an-email" }, "X-Request-ID" => "demo-req-3")

user_id = JSON.parse(ok.body).fetch("id")
# Waits (up to 30 s: the machine may be busy) until the backend holds a job of this type.
def wait_for_type(backend, type)
  deadline = Time.now + 30
  until (jobs = backend_jobs(backend)).any? { |job| job["type"] == type }
    return jobs if Time.now > deadline

    sleep 0.005
  end
  jobs
end
wait_for_type(backend, "email.welcome")
latency_ms = ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - committed_at) * 1000).round(1)
# A job staged after the three signups, in autocommit: once it has arrived, anything wrongly
# sent for the rolled back signup would have arrived before it.
OJS.enqueue_after_commit("demo.sentinel", [0])
jobs = wait_for_type(backend, "demo.sentinel").reject { |job| job["type"] == "demo.sentinel" }

puts
puts "users in the database: #{User.order(:id).pluck(:email).inspect}"
puts "outbox: #{OJS.status.slice('pending', 'sent', 'dead').inspect}"
puts "backend received #{jobs.length} job(s), besides demo.sentinel (staged last, so nothing else follows):"
jobs.each { |job| puts "  #{job['type']} args=#{job['args']} meta=#{job['meta']}" }
puts "commit -> backend: about #{latency_ms} ms (observed by polling the devserver)"

expected = jobs.length == 1 && jobs[0]["type"] == "email.welcome" && jobs[0]["args"] == [user_id] &&
           jobs[0].dig("meta", "ojs.context.request_id") == "demo-req-1" &&
           User.pluck(:email) == ["ada@example.com"]
if expected
  puts "demo: OK - only the committed signup's job reached the backend"
else
  warn "demo: FAILED - the backend should hold exactly the committed signup's job"
  exit 1
end
