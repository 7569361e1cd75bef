//! The Codec Server (OJS encryption extension §9.2) on `ojs-relay run --listen`: a real relay
//! process whose keys come from `OJS_ENCRYPTION_KEYS` and `--encryption-key-id` (or from the
//! `--config` file's `adapter.encryption`), over a real SQLite file and devserver. The operator
//! decodes a sealed job's args and round-trips a payload; no token is 401, a tenant token 403;
//! a relay without keys answers 404; errors and bodies never carry the data they refused.

mod common;

use std::process::{Command, Stdio};

use common::*;
use ojs_devserver::DevServer;
use ojs_outbox::codec::Codec;
use serde_json::{Value, json};

const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

/// `ojs-relay` with these environment variables and arguments, hermetic otherwise.
fn relay_command(db: &Db, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("OJS_DATABASE_URL")
        .env_remove("OJS_URL")
        .env_remove("OJS_RELAY_TOKEN")
        .env_remove("OJS_ENCRYPTION_KEYS")
        .env_remove("OJS_ENCRYPTION_KEY_ID")
        .env("OJS_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .args(["--database-url", &db.url, "--table", &db.table])
        .args(args);
    command
}

fn spawn(db: &Db, name: &str, env: &[(&str, &str)], args: &[&str]) -> RelayProcess {
    let log_path = db.dir.file(&format!("{name}.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    let child = relay_command(db, env, args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("spawn ojs-relay");
    RelayProcess { child, log_path }
}

async fn call(base: &str, path: &str, token: Option<&str>, body: String) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn b64(bytes: &[u8]) -> String {
    ojs_outbox::codec::base64_encode(bytes)
}

fn unb64(text: &Value) -> Vec<u8> {
    ojs_outbox::codec::base64_decode(text.as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_decodes_and_encodes_and_nobody_else_does() {
    let backend = DevServer::start(0).await.unwrap();
    let db = Db::new(Kind::Sqlite, "codec_server").await.unwrap();
    db.migrate().await;
    let url = backend.url();
    let keys = format!("k1={K1},k2={K2}");
    let mut relay = spawn(
        &db,
        "keys-from-env",
        &[("OJS_ENCRYPTION_KEYS", &keys)],
        &[
            "run",
            "--ojs-url",
            &url,
            "--encryption-key-id",
            "k2",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "op",
            "--tenant-token",
            "acme=ta",
        ],
    );
    let base = served_at(&relay).await;

    // A job an application sealed before the rotation (current key k1).
    let before_rotation = Codec::from_value(&json!({"key_id": "k1", "keys": {"k1": K1}})).unwrap();
    let args_text = r#"[{"card": "4111111111111111"}]"#;
    let mut job = ojs_outbox::job::prepare_json("pay.charge", args_text, None, None, None).unwrap();
    before_rotation.seal(&mut job).unwrap();
    let args: Value = serde_json::from_str(&job.args_json).unwrap();
    let meta: Value = serde_json::from_str(&job.meta_json).unwrap();
    let decode = json!({"payloads": [{"data": args[0]["data"],
        "metadata": {"encoding": "binary/encrypted",
                     "encryption_key_id": meta["ojs.codec.key_id"]}}]})
    .to_string();

    let (status, body) = call(&base, "/codec/decode", None, decode.clone()).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = call(&base, "/codec/decode", Some("ta"), decode.clone()).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("carries no tenant"),
        "{body}"
    );
    let (status, body) = call(&base, "/codec/encode", Some("ta"), decode.clone()).await;
    assert_eq!(status, 403, "{body}");

    let (status, body) = call(&base, "/codec/decode", Some("op"), decode.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["payloads"][0]["metadata"],
        json!({"encoding": "json/plain"})
    );
    assert_eq!(unb64(&body["payloads"][0]["data"]), args_text.as_bytes());

    // Encode with the current key (k2), decode back.
    let plain = b64(br#"{"customer_id": "cust_123"}"#);
    let (status, encoded) = call(
        &base,
        "/codec/encode",
        Some("op"),
        json!({"payloads": [{"data": plain, "metadata": {"encoding": "json/plain"}}]}).to_string(),
    )
    .await;
    assert_eq!(status, 200, "{encoded}");
    assert_eq!(
        encoded["payloads"][0]["metadata"],
        json!({"encoding": "binary/encrypted", "encryption_key_id": "k2"})
    );
    assert_ne!(encoded["payloads"][0]["data"], json!(plain));
    let (status, decoded) = call(&base, "/codec/decode", Some("op"), encoded.to_string()).await;
    assert_eq!(status, 200, "{decoded}");
    assert_eq!(decoded["payloads"][0]["data"], json!(plain));

    // Refusals name the payload and the reason, not the data.
    let mut bytes = unb64(&args[0]["data"]);
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let tampered = b64(&bytes);
    let (status, body) = call(
        &base,
        "/codec/decode",
        Some("op"),
        json!({"payloads": [{"data": tampered,
            "metadata": {"encoding": "binary/encrypted", "encryption_key_id": "k1"}}]})
        .to_string(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "decode_failed", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("payloads[0].data"), "{message}");
    assert!(!message.contains(&tampered), "{message}");
    let (status, body) = call(
        &base,
        "/codec/decode",
        Some("op"),
        json!({"payloads": [{"data": args[0]["data"],
            "metadata": {"encoding": "binary/encrypted", "encryption_key_id": "k9"}}]})
        .to_string(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"k9\"")
    );
    let (status, body) = call(&base, "/codec/decode", Some("op"), "not json".into()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_request"))
    );
    let big = json!({"payloads": [{"data": "A".repeat(1024 * 1024)}]}).to_string();
    let (status, body) = call(&base, "/codec/encode", Some("op"), big).await;
    assert_eq!(status, 413, "{body}");

    let log = relay.log();
    assert!(log.contains("Codec Server"), "{log}");
    for secret in [K1, K2, "4111111111111111", "cust_123"] {
        assert!(!log.contains(secret), "the log shows {secret}:\n{log}");
    }
    relay.terminate(std::time::Duration::from_secs(20)).await;
    backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_the_config_file_a_relay_without_keys_and_the_settings_errors() {
    let backend = DevServer::start(0).await.unwrap();
    let db = Db::new(Kind::Sqlite, "codec_config").await.unwrap();
    db.migrate().await;
    let url = backend.url();

    // The --config file's ring, its current key picked by the flag.
    let config = db.config_file(
        &json!({"adapter": {"encryption": {"key_id": "k2", "keys": {"k1": K1, "k2": K2}}}})
            .to_string(),
    );
    let mut relay = spawn(
        &db,
        "keys-from-file",
        &[],
        &[
            "--config",
            &config,
            "run",
            "--ojs-url",
            &url,
            "--encryption-key-id",
            "k1",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "op",
        ],
    );
    let base = served_at(&relay).await;
    let (status, encoded) = call(
        &base,
        "/codec/encode",
        Some("op"),
        json!({"payloads": [{"data": b64(b"[1]"), "metadata": {"encoding": "json/plain"}}]})
            .to_string(),
    )
    .await;
    assert_eq!(status, 200, "{encoded}");
    assert_eq!(
        encoded["payloads"][0]["metadata"]["encryption_key_id"],
        "k1"
    );
    relay.terminate(std::time::Duration::from_secs(20)).await;

    // No keys: no Codec Server (after the token check).
    let mut plain = db.spawn_run(&url, &["--listen", "127.0.0.1:0", "--token", "op"]);
    let base = served_at(&plain).await;
    let (status, _) = call(&base, "/codec/decode", None, "{}".into()).await;
    assert_eq!(status, 401);
    let (status, body) = call(&base, "/codec/decode", Some("op"), "{}".into()).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no encryption configured"),
        "{body}"
    );
    plain.terminate(std::time::Duration::from_secs(20)).await;

    // Settings errors: exit 2, one line naming the setting, no key material.
    let run = |env: Vec<(&'static str, String)>, extra: &[&str]| {
        let mut args = vec!["run", "--ojs-url", url.as_str()];
        args.extend_from_slice(extra);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        relay_command(&db, &env, &args).output().unwrap()
    };
    let line = assert_error(
        &run(vec![("OJS_ENCRYPTION_KEYS", format!("k1={K1}"))], &[]),
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("OJS_ENCRYPTION_KEYS"), "{line}");
    let line = assert_error(
        &run(
            vec![
                ("OJS_ENCRYPTION_KEYS", format!("k1={K1},k2=AAAA")),
                ("OJS_ENCRYPTION_KEY_ID", "k1".into()),
            ],
            &[],
        ),
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("OJS_ENCRYPTION_KEYS.k2"), "{line}");
    assert!(line.contains("3 bytes"), "{line}");
    assert!(!line.contains(K1), "{line}");
    let line = assert_error(
        &run(
            vec![("OJS_ENCRYPTION_KEYS", format!("k1={K1}"))],
            &["--encryption-key-id", "k2"],
        ),
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("--encryption-key-id"), "{line}");
    let line = assert_error(
        &run(vec![], &["--encryption-key-id", "k2"]),
        "INVALID_CONFIG",
        2,
    );
    assert!(line.contains("no keys are configured"), "{line}");
    backend.shutdown().await;
}
