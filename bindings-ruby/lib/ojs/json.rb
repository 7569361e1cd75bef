# frozen_string_literal: true

require "date"
require "json"

module OJS
  # Converts Ruby values to JSON text for the core, strictly: only what has one obvious JSON
  # form (nil, true, false, Integer, finite Float, String in UTF-8, Symbol as its name, Array,
  # Hash with String or Symbol keys). Anything else is refused, naming the path of the bad value,
  # instead of being silently stringified: this module finds the path, the core decides the
  # error (`ojs_bridge::unencodable(part, path, why)`: INVALID_ARGS, INVALID_OPTIONS,
  # INVALID_META, ...). Every rule about *what* the JSON may hold is the core's.
  module JSONValue
    module_function

    # `part`: what the value is of ("args", "options", "meta", "context", "type"; "config" for
    # the settings), `path`: its name in messages.
    def dump(value, part, path = part)
      JSON.generate(checked(value, part, path))
    end

    # `value` itself when it is plain JSON (the common case, checked without allocating),
    # else its normalized copy; raises for what has no JSON form.
    def checked(value, part, path = part)
      plain?(value) ? value : normalize(value, part, path)
    end

    # Exact classes whose values are JSON as they are (checked by identity first: `case` with
    # classes costs a method call per `when`, and this runs for every value of every job).
    LEAVES = { NilClass => true, TrueClass => true, FalseClass => true, Integer => true, Symbol => true }
             .compare_by_identity.freeze
    private_constant :LEAVES

    def plain?(value)
      klass = value.class
      if LEAVES[klass] then true
      elsif klass == String then value.encoding == Encoding::UTF_8 && value.valid_encoding?
      elsif klass == Array then value.all? { |item| plain?(item) }
      elsif klass == Hash then value.all? { |key, item| (key.class == Symbol || key.class == String) && plain?(item) }
      elsif klass == Float then value.finite?
      else # subclasses of the above
        case value
        when String then value.encoding == Encoding::UTF_8 && value.valid_encoding?
        when Array then value.all? { |item| plain?(item) }
        when Hash then value.all? { |key, item| (key.is_a?(String) || key.is_a?(Symbol)) && plain?(item) }
        else false
        end
      end
    end

    def normalize(value, part, path)
      case value
      when nil, true, false, Integer
        value
      when String
        return value if value.encoding == Encoding::UTF_8 && value.valid_encoding?

        utf8 = value.encode(Encoding::UTF_8) rescue nil
        return utf8 if utf8&.valid_encoding?

        refuse(part, path, "is not valid UTF-8 text")
      when Symbol
        value.name
      when Float
        return value if value.finite?

        refuse(part, path, "#{value} has no JSON form")
      when Array
        value.each_with_index.map { |item, index| normalize(item, part, "#{path}[#{index}]") }
      when Hash
        value.each_with_object({}) do |(key, item), out|
          unless key.is_a?(String) || key.is_a?(Symbol)
            refuse(part, path, "has a #{key.class} key #{key.inspect}; JSON object keys are strings")
          end
          name = key.to_s
          out[name] = normalize(item, part, "#{path}.#{name}")
        end
      else
        refuse(part, path, "a #{value.class} is not a JSON value " \
                                  "(use nil, true, false, numbers, strings, arrays and hashes)")
      end
    end

    # Options whose values are points in time: a Time, DateTime or ActiveSupport::TimeWithZone
    # value of an option (`delay_until: 5.minutes.from_now`) becomes RFC 3339 text in UTC, with
    # the sub-second digits it has (none for a whole second, up to nanoseconds), which is how
    # OJS writes a timestamp. Only the options' own values, not values nested in them; which
    # options take a timestamp, and whether the text is one, is the core's to check. A Date
    # (no time of day, no zone) is refused. Anything else is left for `checked`. Returns
    # `options` itself when it holds no such value.
    def time_options(options)
      return options unless options.is_a?(Hash) && options.any? { |_key, value| value.is_a?(Date) || value.is_a?(Time) }

      options.to_h do |key, value|
        if value.instance_of?(Date)
          refuse("options", "options.#{key}",
                 "a Date has no time of day or zone; pass a Time (date.in_time_zone, date.beginning_of_day)")
        end
        [key, value.is_a?(Time) || value.is_a?(DateTime) ? timestamp(value) : value]
      end
    end

    # RFC 3339 text in UTC for a Time, DateTime or ActiveSupport::TimeWithZone (which answers
    # is_a?(Time)): "2026-03-01T09:00:00Z", "2026-03-01T09:00:00.25Z". The value is not changed.
    # (A DateTime is read as it is, not through #to_time, whose zone handling ActiveSupport 7.2
    # is changing.)
    def timestamp(value)
      if value.is_a?(DateTime)
        utc = value.new_offset(0)
        nsec = (utc.sec_fraction * 1_000_000_000).to_i
      else
        utc = value.getutc
        nsec = utc.nsec
      end
      text = utc.strftime("%Y-%m-%dT%H:%M:%S")
      nsec.zero? ? "#{text}Z" : "#{text}.#{format('%09d', nsec).sub(/0+\z/, '')}Z"
    end

    # The core's error for the value at `path` of `part`. The settings are no part of a job:
    # a setting Ruby cannot encode is an OJS::InvalidConfig.
    def refuse(part, path, why)
      raise OJS::InvalidConfig.new("#{path}: #{why}", field: part) if part == "config"

      raise OJS::Error.from_json(OJS::Native.unencodable(part, path, why))
    end
  end
end
