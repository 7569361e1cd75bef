//! The request context read from HTTP headers, once for every framework: which headers, how
//! values are cleaned, and how explicit keys combine with them.

use ojs_outbox::ErrorCode;
use ojs_outbox::job::{CONTEXT_HEADERS, RequestContext};

#[test]
fn headers_map_to_the_context_keys() {
    let headers = [
        (
            "Traceparent",
            " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",
        ),
        ("TRACESTATE", "congo=t61rcWkgMzE"),
        ("X-Request-ID", "req-1"),
        ("x-ojs-tenant", "acme"),
        ("Accept-Language", "fr-CA, fr;q=0.9, en;q=0.8"),
        ("cookie", "ignored=1"),
    ];
    let context = RequestContext::from_headers(&headers, true);
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

/// Any client can send `X-OJS-Tenant`: by default it decides nothing (issue 25).
#[test]
fn the_tenant_header_counts_only_when_the_app_trusts_it() {
    let headers = [("X-OJS-Tenant", "tenant-a"), ("X-Request-Id", "req-1")];
    let context = RequestContext::from_headers(&headers, false);
    assert_eq!(context.tenant_id, None);
    assert_eq!(context.request_id.as_deref(), Some("req-1"));
    assert_eq!(
        RequestContext::from_headers(&headers, true)
            .tenant_id
            .as_deref(),
        Some("tenant-a")
    );
    let text = r#"{"headers": {"x-ojs-tenant": "tenant-a"}}"#;
    assert_eq!(
        RequestContext::from_json(text, false).unwrap().tenant_id,
        None
    );
    // The app's own resolver gives the tenant as an explicit key: it wins over a trusted header.
    let text = r#"{"headers": {"x-ojs-tenant": "tenant-a"}, "tenant_id": "from-session"}"#;
    for trusted in [false, true] {
        assert_eq!(
            RequestContext::from_json(text, trusted)
                .unwrap()
                .tenant_id
                .as_deref(),
            Some("from-session")
        );
    }
}

#[test]
fn blank_values_and_a_wildcard_language_are_absent() {
    let context = RequestContext::from_headers(
        &[
            ("x-request-id", "   "),
            ("x-ojs-tenant", ""),
            ("accept-language", "*"),
        ],
        true,
    );
    assert!(context.is_empty(), "{context:?}");
    let context = RequestContext::from_headers(&[("accept-language", "en;q=0.8")], false);
    assert_eq!(context.locale.as_deref(), Some("en"));
}

#[test]
fn the_json_form_takes_headers_and_explicit_keys_win() {
    let context = RequestContext::from_json(
        r#"{"headers": {"X-Request-Id": "from-header", "X-OJS-Tenant": "acme"},
            "request_id": "framework-id", "user_id": "42"}"#,
        true,
    )
    .unwrap();
    assert_eq!(context.request_id.as_deref(), Some("framework-id"));
    assert_eq!(context.tenant_id.as_deref(), Some("acme"));
    assert_eq!(context.user_id.as_deref(), Some("42"));
    // An empty explicit value does not hide the header's.
    let context = RequestContext::from_json(
        r#"{"headers": {"x-request-id": "h"}, "request_id": ""}"#,
        false,
    )
    .unwrap();
    assert_eq!(context.request_id.as_deref(), Some("h"));
    for bad in [
        r#"{"headers": {"x-request-id": "h"}, "colour": "red"}"#,
        r#"{"headers": ["x-request-id"]}"#,
        r#"{"colour": "red"}"#,
    ] {
        let error = RequestContext::from_json(bad, false).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidMeta, "{bad}");
        assert_eq!(error.field.as_deref(), Some("context"), "{bad}");
    }
}

#[test]
fn the_apps_current_span_wins_over_the_headers_and_loses_to_an_explicit_traceparent() {
    const HEADER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const SPAN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const EXPLICIT: &str = "00-11111111111111111111111111111111-2222222222222222-01";
    let read = |text: &str| {
        let context = RequestContext::from_json(text, false).unwrap();
        (context.traceparent, context.tracestate)
    };
    let pair =
        |parent: &str, state: Option<&str>| (Some(parent.to_owned()), state.map(str::to_owned));
    let headers = format!(r#""headers": {{"traceparent": "{HEADER}", "tracestate": "h=1"}}"#);
    let span = format!(r#""span": {{"traceparent": "{SPAN}", "tracestate": "s=1"}}"#);
    assert_eq!(read(&format!("{{{headers}}}")), pair(HEADER, Some("h=1")));
    assert_eq!(
        read(&format!("{{{headers}, {span}}}")),
        pair(SPAN, Some("s=1"))
    );
    // The pair travels together: an explicit traceparent without a tracestate takes neither
    // the span's nor the header's trace state.
    assert_eq!(
        read(&format!(
            r#"{{{headers}, {span}, "traceparent": "{EXPLICIT}"}}"#
        )),
        pair(EXPLICIT, None)
    );
    // A span without a traceparent (none current) leaves the headers' pair.
    assert_eq!(
        read(&format!(r#"{{{headers}, "span": {{}}}}"#)),
        pair(HEADER, Some("h=1"))
    );
    assert_eq!(read(&format!("{{{span}}}")), pair(SPAN, Some("s=1")));
    let error = RequestContext::from_json(r#"{"span": {"spanid": "x"}}"#, false).unwrap_err();
    assert_eq!(error.field.as_deref(), Some("context"));
}
