//! The request context read from HTTP headers, once for every framework: which headers, how
//! values are cleaned, and how explicit keys combine with them.

use ojs_outbox::ErrorCode;
use ojs_outbox::job::{CONTEXT_HEADERS, RequestContext};

#[test]
fn headers_map_to_the_context_keys() {
    let context = RequestContext::from_headers(&[
        (
            "Traceparent",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
        ),
        ("TRACESTATE", "congo=t61rcWkgMzE"),
        ("X-Request-ID", "req-1"),
        ("x-ojs-tenant", "acme"),
        ("Accept-Language", "fr-CA, fr;q=0.9, en;q=0.8"),
        ("cookie", "ignored=1"),
    ]);
    assert_eq!(
        context,
        RequestContext {
            request_id: Some("req-1".into()),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: Some("congo=t61rcWkgMzE".into()),
            user_id: None,
            tenant_id: Some("acme".into()),
            locale: Some("fr-CA".into()),
        }
    );
    assert_eq!(CONTEXT_HEADERS.len(), 5);
}

#[test]
fn blank_values_and_a_wildcard_language_are_absent() {
    let context = RequestContext::from_headers(&[
        ("x-request-id", "   "),
        ("x-ojs-tenant", ""),
        ("accept-language", "*"),
    ]);
    assert!(context.is_empty(), "{context:?}");
    let context = RequestContext::from_headers(&[("accept-language", "en;q=0.8")]);
    assert_eq!(context.locale.as_deref(), Some("en"));
}

#[test]
fn the_json_form_takes_headers_and_explicit_keys_win() {
    let context = RequestContext::from_json(
        r#"{"headers": {"X-Request-Id": "from-header", "X-OJS-Tenant": "acme"},
            "request_id": "framework-id", "user_id": "42"}"#,
    )
    .unwrap();
    assert_eq!(context.request_id.as_deref(), Some("framework-id"));
    assert_eq!(context.tenant_id.as_deref(), Some("acme"));
    assert_eq!(context.user_id.as_deref(), Some("42"));
    // An empty explicit value does not hide the header's.
    let context =
        RequestContext::from_json(r#"{"headers": {"x-request-id": "h"}, "request_id": ""}"#)
            .unwrap();
    assert_eq!(context.request_id.as_deref(), Some("h"));
    for bad in [
        r#"{"headers": {"x-request-id": "h"}, "colour": "red"}"#,
        r#"{"headers": ["x-request-id"]}"#,
        r#"{"colour": "red"}"#,
    ] {
        let error = RequestContext::from_json(bad).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidMeta, "{bad}");
        assert_eq!(error.field.as_deref(), Some("context"), "{bad}");
    }
}
