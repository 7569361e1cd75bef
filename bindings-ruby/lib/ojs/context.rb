# frozen_string_literal: true

module OJS
  # The request context (FA-R001) applied to every enqueue: `request_id`, `traceparent`,
  # `tracestate`, `user_id`, `tenant_id`, `locale`. The core validates it and merges it into
  # the job's `meta` (explicit meta keys win); this module only stores it for the current
  # request.
  #
  # Storage is per fiber (Ruby's `Thread.current[]` is fiber-local), or follows Rails'
  # isolation level through ActiveSupport::IsolatedExecutionState where it exists (Rails 7+).
  # A value may be a callable, evaluated at enqueue time (the middleware uses this for the
  # current user, who may sign in during the request).
  module Context
    KEY = :ojs_request_context
    # Rails 7+: follow ActiveSupport's isolation level (thread or fiber).
    ISOLATED = defined?(ActiveSupport::IsolatedExecutionState) ? true : false
    private_constant :ISOLATED

    class << self
      # The context hash, or nil outside any request.
      def current
        storage[KEY]&.first
      end

      # Replaces the whole context (keys left out are unset). nil or {} clears it.
      def set(context)
        storage[KEY] = context.nil? || context.empty? ? nil : [context.dup.freeze, nil]
      end

      def clear
        storage[KEY] = nil
      end

      # Runs the block with `context` set, then restores what was there before.
      def with(context)
        previous = storage[KEY]
        set(context)
        yield
      ensure
        storage[KEY] = previous
      end

      # The context as JSON text for the core (nil when there is none). Callables are
      # evaluated now and nil values dropped; a context without callables is encoded once.
      def json
        entry = storage[KEY]
        return nil unless entry

        context, encoded = entry
        return encoded if encoded

        dynamic = context.each_value.any? { |value| value.respond_to?(:call) }
        values = context.each_with_object({}) do |(key, value), out|
          value = value.call if value.respond_to?(:call)
          out[key] = value unless value.nil?
        end
        text = values.empty? ? nil : JSONValue.dump(values, "context")
        storage[KEY] = [context, text] unless dynamic || text.nil?
        text
      end

      private

      def storage
        ISOLATED ? ActiveSupport::IsolatedExecutionState : Thread.current
      end
    end
  end
end
