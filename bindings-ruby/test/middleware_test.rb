# frozen_string_literal: true

# FA-R001 through the Rack middleware: the request's headers reach the job's meta, on the
# backend, for enqueue_after_commit, enqueue_bulk and enqueue; and the context is per request
# (threads and fibers do not see each other's).

require_relative "test_helper"
require "rack"
require "rack/mock"

class MiddlewareTest < Minitest::Test
  TABLE = "rb_middleware"
  TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

  # A signup endpoint: the job ids it staged are the response body.
  SIGNUP = lambda do |_env|
    ids = ActiveRecord::Base.transaction do
      [OJS.enqueue_after_commit("email.welcome", [1]),
       *OJS.enqueue_bulk([{ type: "email.digest", args: [2] }])]
    end
    ids << OJS.enqueue("audit.signup", [3])
    [201, { "content-type" => "application/json" }, [JSON.generate(ids)]]
  end

  def setup
    TestSupport.connect(:sqlite, "middleware", table: TABLE)
    TestSupport.configure(table: TABLE)
    TestSupport.devserver.reset
  end

  # The next test replaces the database file: no relay of this one may still be reading it.
  def teardown
    OJS.stop_relay
  end

  def request(app, headers)
    env = headers.transform_keys { |name| "HTTP_#{name.upcase.tr('-', '_')}" }
    Rack::MockRequest.new(app).post("/signup", env)
  end

  # The app trusts X-OJS-Tenant here (a gateway in front of it sets it): issue 25.
  def test_request_headers_land_in_the_meta_of_every_kind_of_enqueue
    TestSupport.configure(table: TABLE, trust_tenant_header: true)
    warden = Struct.new(:user).new(Struct.new(:id).new(42)) # what Devise puts in env["warden"]
    with_warden = ->(env) { env["warden"] = warden; OJS::Middleware.new(SIGNUP).call(env) }
    response = request(with_warden, "X-Request-ID" => "req-7", "traceparent" => TRACEPARENT,
                                     "tracestate" => "vendor=1", "X-OJS-Tenant" => "acme",
                                     "Accept-Language" => "fr-CH, fr;q=0.9, en;q=0.8")
    assert_equal 201, response.status
    ids = JSON.parse(response.body)
    assert_equal 3, ids.length
    TestSupport.devserver.wait_for(ids).each do |job|
      meta = job["meta"]
      assert_equal "req-7", meta["ojs.context.request_id"], job
      assert_equal TRACEPARENT, meta["traceparent"]
      assert_equal "vendor=1", meta["tracestate"]
      assert_equal "acme", meta["tenant_id"]
      assert_equal "fr-CH", meta["ojs.context.locale"]
      assert_equal "42", meta["ojs.context.user_id"]
    end
  end

  def test_configured_current_user_lambda_and_missing_headers
    middleware = OJS::Middleware.new(SIGNUP, current_user_id: ->(env) { env["HTTP_X_USER"] })
    response = request(middleware, "X-User" => "u-9")
    ids = JSON.parse(response.body)
    job = TestSupport.devserver.wait_for([ids.first]).first
    assert_equal "u-9", job["meta"]["ojs.context.user_id"]
    %w[ojs.context.request_id traceparent tenant_id ojs.context.locale].each do |key|
      refute job["meta"]&.key?(key), "#{key} should be absent: #{job['meta']}"
    end
  end

  # The middleware passes the headers the core names and Rails' own request id, which wins
  # over X-Request-ID; the core maps them (trimmed values, the first Accept-Language tag).
  def test_rails_request_id_wins_and_the_core_maps_the_headers
    TestSupport.configure(table: TABLE, trust_tenant_header: true)
    with_rails_id = ->(env) { env["action_dispatch.request_id"] = "rails-req-1"; OJS::Middleware.new(SIGNUP).call(env) }
    response = request(with_rails_id, "X-Request-ID" => "req-7", "X-OJS-Tenant" => "  acme  ",
                                      "Accept-Language" => " de-CH;q=0.9, en")
    ids = JSON.parse(response.body)
    TestSupport.devserver.wait_for(ids).each do |job|
      assert_equal "rails-req-1", job["meta"]["ojs.context.request_id"], job
      assert_equal "acme", job["meta"]["tenant_id"]
      assert_equal "de-CH", job["meta"]["ojs.context.locale"]
    end
    context = OJS::Middleware.new(SIGNUP).context_for("HTTP_TRACEPARENT" => TRACEPARENT, "HTTP_X_OTHER" => "x")
    assert_equal({ "traceparent" => TRACEPARENT }, context[:headers], "only the headers the core names")
  end

  # --- the tenant and the user come from the application, not the client (issue 25) ---------

  # A signup that stages one job in a transaction; the body is its id.
  STAGE_ONE = lambda do |_env|
    id = ActiveRecord::Base.transaction { OJS.enqueue_after_commit("email.welcome", [1]) }
    [201, { "content-type" => "text/plain" }, [id]]
  end

  # What Devise puts in env["warden"]: a signed-in user of account `account_id`.
  def signed_in(account_id, app = OJS::Middleware.new(STAGE_ONE))
    user = Struct.new(:id, :account_id).new(7, account_id)
    warden = Struct.new(:user).new(user)
    ->(env) { env["warden"] = warden; app.call(env) }
  end

  # The job's tenant as the backend got it (meta.tenant_id) and as its row has it (tenant_id).
  def tenant_of(response)
    assert_equal 201, response.status, response.body
    id = response.body
    job = TestSupport.devserver.wait_for([id]).first
    row = ActiveRecord::Base.connection.select_value(
      "SELECT tenant_id FROM #{TABLE} WHERE job_id = #{ActiveRecord::Base.connection.quote(id)}"
    )
    meta_tenant = job["meta"]&.fetch("tenant_id", nil)
    assert meta_tenant == row, "the row's tenant (#{row.inspect}) is the meta's (#{meta_tenant.inspect})"
    row
  end

  ACCOUNT_TENANT = ->(env) { env["warden"]&.user&.account_id }

  # A fresh table on `database`, OJS configured with `settings` (setup's relay stopped first:
  # its database is replaced).
  def fresh(database, **settings)
    OJS.stop_relay
    TestSupport.connect(database, "middleware", table: TABLE)
    TestSupport.configure(table: TABLE, **settings)
  end

  TestSupport.databases.each do |database|
    # Any client can send X-OJS-Tenant: by default it decides nothing (before the fix this job
    # was tenant-a's, and showed in tenant-a's event stream and dead letters).
    define_method("test_#{database}_an_anonymous_x_ojs_tenant_header_gives_no_tenant") do
      fresh(database)
      assert_nil tenant_of(request(OJS::Middleware.new(STAGE_ONE), "X-OJS-Tenant" => "tenant-a"))
    end

    define_method("test_#{database}_the_tenant_hook_gives_the_tenant") do
      fresh(database, current_tenant_id: ACCOUNT_TENANT)
      assert_equal "acct-9", tenant_of(request(signed_in("acct-9"), "X-OJS-Tenant" => "tenant-a"))
      # An anonymous request: the hook gives nil, the untrusted header still nothing.
      assert_nil tenant_of(request(OJS::Middleware.new(STAGE_ONE), "X-OJS-Tenant" => "tenant-a"))
    end

    define_method("test_#{database}_a_trusted_tenant_header_counts") do
      fresh(database, trust_tenant_header: true)
      assert_equal "tenant-a", tenant_of(request(OJS::Middleware.new(STAGE_ONE), "X-OJS-Tenant" => "tenant-a"))
    end

    define_method("test_#{database}_the_tenant_hook_wins_over_a_trusted_header") do
      fresh(database, trust_tenant_header: true, current_tenant_id: ACCOUNT_TENANT)
      assert_equal "acct-9", tenant_of(request(signed_in("acct-9"), "X-OJS-Tenant" => "tenant-a"))
      # The hook gives none (nobody signed in): the trusted header decides.
      assert_equal "tenant-a", tenant_of(request(OJS::Middleware.new(STAGE_ONE), "X-OJS-Tenant" => "tenant-a"))
    end
  end

  # The middleware's own option (outside Rails, `use OJS::Middleware, current_tenant_id: ...`)
  # wins over config.current_tenant_id; it is called when the job is staged, not before.
  def test_the_middleware_s_tenant_hook_is_called_when_a_job_is_staged
    TestSupport.configure(table: TABLE, current_tenant_id: ->(_env) { "from-config" })
    calls = 0
    hook = lambda do |env|
      calls += 1
      env["warden"].user.account_id
    end
    app = lambda do |env|
      env["warden"].user.account_id = "signed-in-during-the-request"
      STAGE_ONE.call(env)
    end
    assert_equal "signed-in-during-the-request",
                 tenant_of(request(signed_in(nil, OJS::Middleware.new(app, current_tenant_id: hook)), {}))
    assert_equal 1, calls
    assert_equal 0, calls_of_a_request_without_jobs
  end

  def calls_of_a_request_without_jobs
    calls = 0
    hook = ->(_env) { calls += 1; "t" }
    request(OJS::Middleware.new(->(_env) { [204, {}, []] }, current_tenant_id: hook), {})
    calls
  end

  def test_a_tenant_hook_that_is_not_callable_or_gives_a_non_string_is_refused_naming_it
    error = assert_raises(OJS::InvalidConfig) do
      TestSupport.configure(table: TABLE, current_tenant_id: "acme")
    end
    assert_equal "config.current_tenant_id", error.field
    assert_match(/call\(env\)/, error.message)
    error = assert_raises(OJS::InvalidConfig) { OJS::Middleware.new(STAGE_ONE, current_tenant_id: 5) }
    assert_equal "current_tenant_id", error.field

    [42, :acme, ["a"]].each do |value|
      TestSupport.configure(table: TABLE, current_tenant_id: ->(_env) { value })
      error = assert_raises(OJS::InvalidConfig) { request(OJS::Middleware.new(STAGE_ONE), {}) }
      assert_equal "config.current_tenant_id", error.field
      assert_includes error.message, value.class.name
      assert_match(/String/, error.message)
    end
    assert_equal 0, TestSupport.outbox_count(TABLE), "nothing was staged"
    error = assert_raises(OJS::InvalidConfig) { TestSupport.configure(table: TABLE, trust_tenant_header: "yes") }
    assert_equal "adapter.trust_tenant_header", error.field
  end

  # ojs.context.user_id is the application's (config.current_user_id, else Devise's warden),
  # never a client's header.
  def test_the_user_id_comes_from_the_application_never_from_a_header
    headers = { "X-OJS-User" => "666", "X-User-Id" => "666", "X-OJS-User-Id" => "666", "User-Id" => "666",
                "X-OJS-Context-User-Id" => "666" }
    response = request(OJS::Middleware.new(STAGE_ONE), headers)
    job = TestSupport.devserver.wait_for([response.body]).first
    refute job["meta"]&.key?("ojs.context.user_id"), "an anonymous request has no user: #{job['meta']}"
    response = request(signed_in("acct-9"), headers)
    job = TestSupport.devserver.wait_for([response.body]).first
    assert_equal "7", job["meta"]["ojs.context.user_id"]
  end

  def test_no_context_outside_a_request
    request(OJS::Middleware.new(SIGNUP), "X-Request-ID" => "req-1")
    assert_nil OJS.context
    id = OJS.enqueue_after_commit("email.welcome", [9])
    job = TestSupport.devserver.wait_for([id]).first
    refute job["meta"]&.key?("ojs.context.request_id")
  end

  # Two requests on two threads, both in flight at once (each waits for the other to arrive);
  # each reports its own context, and the context a new Fiber inside the request sees.
  def concurrent_requests
    seen = Queue.new
    arrived = Queue.new
    go = Queue.new
    app = lambda do |env|
      arrived << true
      go.pop # both requests are in flight
      seen << [env["HTTP_X_REQUEST_ID"], OJS.context[:headers]["x-request-id"]]
      Fiber.new { seen << [:fiber, OJS.context&.fetch(:headers)&.fetch("x-request-id")] }.resume
      [200, {}, [""]]
    end
    threads = %w[req-a req-b].map do |id|
      Thread.new { request(OJS::Middleware.new(app), "X-Request-ID" => id) }
    end
    2.times { arrived.pop }
    2.times { go << true }
    threads.each(&:join)
    Array.new(4) { seen.pop }.partition { |first, _| first != :fiber }
  end

  # Threads never share a context. Fibers follow the isolation of the Rails version: per fiber
  # without ActiveSupport::IsolatedExecutionState (Rails 6.1, Ruby's fiber-local
  # Thread.current[]), and as IsolatedExecutionState.isolation_level says on Rails 7+ (default
  # :thread: a Fiber inside the request is part of the request and sees its context).
  def test_context_is_per_thread_and_follows_the_fiber_isolation_level
    requests, fibers = concurrent_requests
    assert_equal [%w[req-a req-a], %w[req-b req-b]], requests.sort
    if defined?(ActiveSupport::IsolatedExecutionState) && ActiveSupport::IsolatedExecutionState.isolation_level == :thread
      assert_equal [[:fiber, "req-a"], [:fiber, "req-b"]], fibers.sort
    else
      assert_equal [[:fiber, nil], [:fiber, nil]], fibers
    end
  end

  def test_context_is_per_fiber_under_fiber_isolation
    skip "ActiveSupport::IsolatedExecutionState is Rails 7+; 6.1 is always per fiber (the test above)" unless
      defined?(ActiveSupport::IsolatedExecutionState)

    previous = ActiveSupport::IsolatedExecutionState.isolation_level
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber # what Falcon-style servers set
    begin
      requests, fibers = concurrent_requests
    ensure
      ActiveSupport::IsolatedExecutionState.isolation_level = previous
    end
    assert_equal [%w[req-a req-a], %w[req-b req-b]], requests.sort
    assert_equal [[:fiber, nil], [:fiber, nil]], fibers
  end
end
