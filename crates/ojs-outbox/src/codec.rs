//! The OJS encryption extension (`urn:ojs:ext:experimental:encryption`, spec 0.1.0) for job
//! `args`: AES-256-GCM under a configured key ring (`adapter.encryption`), with key rotation.
//!
//! - [`Codec::seal`]: a prepared job's `args` become the spec's encoded envelope (§5.2),
//!   `[{"ojs_encoded":true,"encoding":"binary/encrypted","data":"<base64>"}]`, and its `meta`
//!   gets `ojs.codec.encodings` and `ojs.codec.key_id` (§5.3). The data is the §6.2 format:
//!   version byte `0x01`, a random 12-byte nonce, the ciphertext of the args JSON text, the
//!   16-byte tag; no associated data.
//! - [`Codec::open_args`]: the worker side, before a job reaches its handler (ENC-004).
//! - [`encode_payloads`] / [`decode_payloads`]: the Codec Server's bodies (§9.2), for the
//!   relay's `POST /codec/encode` and `POST /codec/decode`.
//!
//! Only `args` is encrypted; `type`, `options`, the id and `meta` stay readable (§6.3). The
//! cipher and the nonces are RustCrypto's `aes-gcm` with the OS random source; key bytes live
//! only in [`Codec`], which never prints them, and are wiped when it is dropped. No error
//! message carries plaintext, ciphertext or key material.

use std::collections::BTreeMap;
use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use crate::error::{Error, ErrorCode, Result};

/// The encoding name of the encryption codec (§5.1, §6).
pub const ENCRYPTED: &str = "binary/encrypted";
/// The Codec Server's name for a decoded payload (§9.2).
pub const JSON_PLAIN: &str = "json/plain";
/// The `meta` key listing the encodings applied, in order (§5.3).
pub const META_ENCODINGS: &str = "ojs.codec.encodings";
/// The `meta` key naming the key a job was encrypted with (§5.3, §10.1).
pub const META_KEY_ID: &str = "ojs.codec.key_id";
/// The first byte of the encrypted data: AES-256-GCM (§6.2).
pub const VERSION: u8 = 0x01;
/// Bytes of an AES-256 key.
pub const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
/// The configuration section, as errors name it.
pub const SECTION: &str = "adapter.encryption";
/// The keys of the `adapter.encryption` object.
pub const OPTION_KEYS: &[&str] = &["key_id", "keys"];

/// One AES-256 key: never printed, wiped on drop.
#[derive(Clone)]
struct SecretKey(Zeroizing<[u8; KEY_BYTES]>);

impl SecretKey {
    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(self.0.as_ref().into())
    }
}

impl PartialEq for SecretKey {
    /// Constant time in the bytes (only configurations are compared, but it costs nothing).
    fn eq(&self, other: &Self) -> bool {
        let differ = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(differ) == 0
    }
}

/// The key ring of `adapter.encryption`: new jobs are sealed with the key named by `key_id`;
/// every key opens the jobs sealed with it, so a rotated-out key stays until its jobs are gone
/// (§10.1). `Debug` shows the key ids only.
#[derive(Clone, PartialEq)]
pub struct Codec {
    key_id: String,
    keys: BTreeMap<String, SecretKey>,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec")
            .field("key_id", &self.key_id)
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn invalid(field: &str, why: impl Into<String>) -> Error {
    Error::field(ErrorCode::InvalidConfig, field, why)
}

/// A key id: it goes into `meta` and into `OJS_ENCRYPTION_KEYS`' `ID=KEY` list, so letters,
/// digits and `.`, `_`, `-`, `:` only, at most 128 bytes.
fn check_key_id(id: &str, field: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{id:?} is not a key id: use 1 to 128 letters, digits, '.', '_', '-' or ':'"),
        ))
    }
}

/// A key's text: standard base64 (RFC 4648 §4, with `=` padding) of exactly 32 bytes. The
/// message never repeats the text.
fn decode_key(text: &str, field: &str) -> Result<SecretKey> {
    let bytes = Zeroizing::new(STANDARD.decode(text.trim()).map_err(|_| {
        invalid(
            field,
            "is not standard base64 (A-Z, a-z, 0-9, '+', '/', padded with '='; URL-safe base64 is not accepted) of a 32-byte key",
        )
    })?);
    if bytes.len() != KEY_BYTES {
        return Err(invalid(
            field,
            format!(
                "decodes to {} bytes; AES-256-GCM needs a key of exactly {KEY_BYTES} bytes (e.g. `openssl rand -base64 32`)",
                bytes.len()
            ),
        ));
    }
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    key.copy_from_slice(&bytes);
    Ok(SecretKey(key))
}

impl Codec {
    /// The key ring from its parts: `keys` as (id, standard base64 of 32 bytes). `keys_field`
    /// and `key_id_field` are how the user set them, for the errors (a key's own error names
    /// `<keys_field>.<id>`).
    pub fn from_parts<'a>(
        key_id: &str,
        keys: impl IntoIterator<Item = (&'a str, &'a str)>,
        key_id_field: &str,
        keys_field: &str,
    ) -> Result<Codec> {
        let mut ring = BTreeMap::new();
        for (id, text) in keys {
            let field = format!("{keys_field}.{id}");
            check_key_id(id, &field)?;
            if ring
                .insert(id.to_owned(), decode_key(text, &field)?)
                .is_some()
            {
                return Err(invalid(&field, "given more than once"));
            }
        }
        if ring.is_empty() {
            return Err(invalid(
                keys_field,
                "names no key: give at least the key new jobs are encrypted with",
            ));
        }
        check_key_id(key_id, key_id_field)?;
        if !ring.contains_key(key_id) {
            let known: Vec<&str> = ring.keys().map(String::as_str).collect();
            return Err(invalid(
                key_id_field,
                format!(
                    "{key_id:?} is not one of the keys in {keys_field} ({})",
                    known.join(", ")
                ),
            ));
        }
        Ok(Codec {
            key_id: key_id.to_owned(),
            keys: ring,
        })
    }

    /// The `adapter.encryption` object: `{"key_id": "k2", "keys": {"k1": "<base64>", "k2":
    /// "<base64>"}}`. Errors are `INVALID_CONFIG` naming the field (`adapter.encryption.keys.k1`),
    /// never the key.
    pub fn from_value(value: &Value) -> Result<Codec> {
        let section = value.as_object().ok_or_else(|| {
            invalid(
                SECTION,
                r#"must be a JSON object such as {"key_id": "k1", "keys": {"k1": "<base64 of 32 bytes>"}}"#,
            )
        })?;
        for key in section.keys() {
            if !OPTION_KEYS.contains(&key.as_str()) {
                let error = crate::config::unknown_option(key, OPTION_KEYS);
                let why = error
                    .message
                    .strip_prefix(&format!("{key}: "))
                    .unwrap_or(&error.message);
                return Err(invalid(&format!("{SECTION}.{key}"), why));
            }
        }
        let key_id_field = format!("{SECTION}.key_id");
        let keys_field = format!("{SECTION}.keys");
        let key_id = match section.get("key_id") {
            Some(Value::String(id)) => id.as_str(),
            None | Some(Value::Null) => {
                return Err(invalid(
                    &key_id_field,
                    "is required: the id, in adapter.encryption.keys, of the key new jobs are encrypted with",
                ));
            }
            Some(_) => return Err(invalid(&key_id_field, "must be a string")),
        };
        let keys = match section.get("keys") {
            Some(Value::Object(keys)) => keys,
            None | Some(Value::Null) => {
                return Err(invalid(
                    &keys_field,
                    r#"is required: an object of key id to standard base64 of 32 bytes, {"k1": "..."}"#,
                ));
            }
            Some(_) => {
                return Err(invalid(
                    &keys_field,
                    "must be a JSON object of key id to base64 key",
                ));
            }
        };
        let mut texts = Vec::with_capacity(keys.len());
        for (id, text) in keys {
            match text.as_str() {
                Some(text) => texts.push((id.as_str(), text)),
                None => {
                    return Err(invalid(
                        &format!("{keys_field}.{id}"),
                        "must be a string: the key as standard base64 of 32 bytes",
                    ));
                }
            }
        }
        Codec::from_parts(key_id, texts, &key_id_field, &keys_field)
    }

    /// The key ring of `OJS_ENCRYPTION_KEYS`-style text, `ID=BASE64,ID=BASE64`, with the
    /// current key's id; `keys_name` and `key_id_name` name the two settings in errors.
    pub fn from_key_list(
        key_id: &str,
        list: &str,
        key_id_name: &str,
        keys_name: &str,
    ) -> Result<Codec> {
        let mut pairs = Vec::new();
        for (n, item) in list.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let (id, key) = item.split_once('=').ok_or_else(|| {
                invalid(
                    keys_name,
                    format!(
                        "item {} is not ID=BASE64 (items are separated by ',')",
                        n + 1
                    ),
                )
            })?;
            pairs.push((id.trim(), key.trim()));
        }
        Codec::from_parts(key_id, pairs, key_id_name, keys_name)
    }

    /// The same ring with another current key (a rotation set by a flag); `field` names where
    /// the id came from when it is not in the ring.
    pub fn with_key_id(&self, key_id: &str, field: &str) -> Result<Codec> {
        if !self.keys.contains_key(key_id) {
            let known: Vec<&str> = self.key_ids().collect();
            return Err(invalid(
                field,
                format!(
                    "{key_id:?} is not one of the configured keys ({})",
                    known.join(", ")
                ),
            ));
        }
        Ok(Codec {
            key_id: key_id.to_owned(),
            keys: self.keys.clone(),
        })
    }

    /// The id of the key new jobs are sealed with.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Every key id of the ring, sorted.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// `plaintext` encrypted with the current key: the §6.2 bytes (version, random nonce,
    /// ciphertext, tag).
    pub fn encrypt(&self, plaintext: &[u8]) -> Vec<u8> {
        let cipher = self.keys[&self.key_id].cipher();
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(&nonce, plaintext)
            .expect("AES-GCM encrypts any length below 64 GiB");
        let mut out = Vec::with_capacity(1 + NONCE_BYTES + sealed.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The plaintext of §6.2 bytes encrypted with key `key_id`. `field` names the data in
    /// errors: an unknown key id is `INVALID_CONFIG` (the key is not configured here); a bad
    /// version, a short input or a tag that does not verify is `INVALID_ARGS`.
    pub fn decrypt(&self, key_id: &str, data: &[u8], field: &str) -> Result<Vec<u8>> {
        let key = self.keys.get(key_id).ok_or_else(|| {
            let known: Vec<&str> = self.key_ids().collect();
            invalid(
                &format!("{SECTION}.keys"),
                format!(
                    "no key {key_id:?} is configured (keys: {}); keep a rotated-out key until every job encrypted with it is processed",
                    known.join(", ")
                ),
            )
        })?;
        let bad = |why: &str| Error::field(ErrorCode::InvalidArgs, field, why);
        match data.first() {
            None => return Err(bad("the encrypted data is empty")),
            Some(&VERSION) => {}
            Some(other) => {
                return Err(bad(&format!(
                    "unknown encryption version byte 0x{other:02x} (this core reads 0x01, AES-256-GCM)"
                )));
            }
        }
        if data.len() < 1 + NONCE_BYTES + TAG_BYTES {
            return Err(bad(&format!(
                "the encrypted data is {} bytes, shorter than version, nonce and tag ({})",
                data.len(),
                1 + NONCE_BYTES + TAG_BYTES
            )));
        }
        let nonce = Nonce::from_slice(&data[1..1 + NONCE_BYTES]);
        key.cipher()
            .decrypt(nonce, &data[1 + NONCE_BYTES..])
            .map_err(|_| {
                bad(&format!(
                    "the data does not authenticate under key {key_id:?} (altered, or encrypted with another key under that id)"
                ))
            })
    }

    /// Encrypts the job's `args` with the current key (§5.2, §6.2) and records the codec in
    /// its `meta` (§5.3). Only `args_json` and `meta_json` change. A job whose args already are
    /// an encoded envelope, or whose meta already carries `ojs.codec.*`, is refused
    /// (`INVALID_ARGS` / `INVALID_META`): the core alone writes them. The sealed job's wire
    /// form must still fit in 1 MiB (`PAYLOAD_TOO_LARGE`).
    pub fn seal(&self, job: &mut crate::job::PreparedJob) -> Result<()> {
        // Only a text that names the marker is parsed: sealing is on the staging hot path.
        if job.args_json.contains("ojs_encoded")
            && serde_json::from_str::<Value>(&job.args_json).is_ok_and(|args| is_encoded(&args))
        {
            return Err(Error::field(
                ErrorCode::InvalidArgs,
                "args",
                "is already an encoded envelope (ojs_encoded); the core encrypts args itself when adapter.encryption is set",
            ));
        }
        let mut meta: Map<String, Value> = match serde_json::from_str(&job.meta_json) {
            Ok(Value::Object(meta)) => meta,
            _ => {
                return Err(Error::field(
                    ErrorCode::InvalidMeta,
                    "meta",
                    "must be a JSON object",
                ));
            }
        };
        for key in [META_ENCODINGS, META_KEY_ID] {
            if meta.contains_key(key) {
                return Err(Error::field(
                    ErrorCode::InvalidMeta,
                    format!("meta.{key}"),
                    "is written by the core's encryption (adapter.encryption); leave it out",
                ));
            }
        }
        let data = STANDARD.encode(self.encrypt(job.args_json.as_bytes()));
        meta.insert(META_ENCODINGS.into(), json!([ENCRYPTED]));
        meta.insert(META_KEY_ID.into(), json!(self.key_id));
        let args_json =
            format!(r#"[{{"ojs_encoded":true,"encoding":"{ENCRYPTED}","data":"{data}"}}]"#);
        let meta_json = Value::Object(meta).to_string();
        let (old_args, old_meta) = (
            std::mem::replace(&mut job.args_json, args_json),
            std::mem::replace(&mut job.meta_json, meta_json),
        );
        let wire_bytes = job.wire_len();
        if wire_bytes > crate::job::MAX_WIRE_BYTES {
            job.args_json = old_args;
            job.meta_json = old_meta;
            return Err(Error::field(
                ErrorCode::PayloadTooLarge,
                "args",
                format!(
                    "encrypted, the job's wire form is {wire_bytes} bytes (base64 adds a third); OJS backends accept at most {}",
                    crate::job::MAX_WIRE_BYTES
                ),
            ));
        }
        Ok(())
    }

    /// A fetched job's plaintext `args`: `Ok(None)` when they are not an encoded envelope
    /// ([`is_encoded`]); otherwise decrypted with the key `meta["ojs.codec.key_id"]` names,
    /// after checking `meta["ojs.codec.encodings"]` is `["binary/encrypted"]`. A job this ring
    /// cannot open is an error (`INVALID_META`, `INVALID_ARGS` or `INVALID_CONFIG` for a key
    /// that is not configured) whose message says why and never carries the data.
    pub fn open_args(&self, args: &Value, meta: &Value) -> Result<Option<Value>> {
        if !is_encoded(args) {
            return Ok(None);
        }
        let envelope = &args[0];
        let encodings = &meta[META_ENCODINGS];
        if encodings != &json!([ENCRYPTED]) {
            return Err(Error::field(
                ErrorCode::InvalidMeta,
                format!("meta.{META_ENCODINGS}"),
                format!(
                    "is {}; this core decodes [\"{ENCRYPTED}\"] only",
                    describe(encodings)
                ),
            ));
        }
        if envelope.get("encoding").and_then(Value::as_str) != Some(ENCRYPTED) {
            return Err(Error::field(
                ErrorCode::InvalidArgs,
                "args[0].encoding",
                format!(
                    "is {}; this core decodes \"{ENCRYPTED}\" only",
                    describe(&envelope["encoding"])
                ),
            ));
        }
        let key_id = meta[META_KEY_ID].as_str().ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidMeta,
                format!("meta.{META_KEY_ID}"),
                "is missing: an encrypted job names its key",
            )
        })?;
        let data = envelope
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::field(
                    ErrorCode::InvalidArgs,
                    "args[0].data",
                    "is missing or not a string",
                )
            })?;
        let bytes = STANDARD.decode(data).map_err(|_| {
            Error::field(
                ErrorCode::InvalidArgs,
                "args[0].data",
                "is not standard base64",
            )
        })?;
        let plaintext = Zeroizing::new(self.decrypt(key_id, &bytes, "args[0].data")?);
        serde_json::from_slice(&plaintext).map(Some).map_err(|_| {
            Error::field(
                ErrorCode::InvalidArgs,
                "args[0].data",
                "decrypts to something that is not JSON",
            )
        })
    }
}

/// Standard base64 with padding, as the codec writes `data` (for tools building payloads).
pub fn base64_encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Standard base64 with padding, as the codec reads `data`; `None` for anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).ok()
}

/// Whether `args` is the spec's encoded envelope: a one-element array whose element is an
/// object with `"ojs_encoded": true` (ENC-005).
pub fn is_encoded(args: &Value) -> bool {
    matches!(args.as_array(), Some(items) if items.len() == 1
        && items[0].get("ojs_encoded") == Some(&Value::Bool(true)))
}

/// The Codec Server request (`POST /codec/decode`) that decodes a stored job's encoded
/// `args`: its data, and the key id its `meta` names. `Null` when `args` is not encoded.
pub fn decode_request_for(args: &Value, meta: &Value) -> Value {
    if !is_encoded(args) {
        return Value::Null;
    }
    json!({"payloads": [{
        "data": args[0]["data"],
        "metadata": {"encoding": ENCRYPTED, "encryption_key_id": meta[META_KEY_ID]},
    }]})
}

/// A JSON value's kind, or the value when it is short and not data (encodings, names).
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "missing".into(),
        Value::String(s) if s.len() <= 64 => format!("{s:?}"),
        Value::Array(items)
            if items
                .iter()
                .all(|i| i.as_str().is_some_and(|s| s.len() <= 64)) =>
        {
            value.to_string()
        }
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        _ => "not a string".into(),
    }
}

/// The Codec Server's payloads (§9.2): `{"payloads": [{"data", "metadata"}]}`.
fn payloads(request: &Value) -> Result<&Vec<Value>> {
    request
        .get("payloads")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            Error::field(
                ErrorCode::InvalidArgs,
                "payloads",
                r#"the body must be {"payloads": [{"data": "<base64>", "metadata": {"encoding": "..."}}]}"#,
            )
        })
}

fn payload_parts<'a>(payload: &'a Value, at: &str) -> Result<(&'a str, Option<&'a str>)> {
    let data = payload.get("data").and_then(Value::as_str).ok_or_else(|| {
        Error::field(
            ErrorCode::InvalidArgs,
            format!("{at}.data"),
            "must be a base64 string",
        )
    })?;
    let encoding = payload
        .get("metadata")
        .and_then(|m| m.get("encoding"))
        .and_then(Value::as_str);
    Ok((data, encoding))
}

/// `POST /codec/decode` (§9.2): each `binary/encrypted` payload (`metadata.encryption_key_id`
/// names its key) becomes `{"data": <base64 of the plaintext>, "metadata": {"encoding":
/// "json/plain"}}`; a payload of another encoding is returned as it came. The `data` of an
/// encoded job envelope (`args[0].data`) is such a payload's `data`.
pub fn decode_payloads(codec: &Codec, request: &Value) -> Result<Value> {
    let mut out = Vec::new();
    for (n, payload) in payloads(request)?.iter().enumerate() {
        let at = format!("payloads[{n}]");
        let (data, encoding) = payload_parts(payload, &at)?;
        if encoding != Some(ENCRYPTED) {
            out.push(payload.clone());
            continue;
        }
        let key_id = payload
            .pointer("/metadata/encryption_key_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::field(
                    ErrorCode::InvalidArgs,
                    format!("{at}.metadata.encryption_key_id"),
                    "is required for binary/encrypted",
                )
            })?;
        let bytes = STANDARD.decode(data).map_err(|_| {
            Error::field(
                ErrorCode::InvalidArgs,
                format!("{at}.data"),
                "is not standard base64",
            )
        })?;
        let plaintext = Zeroizing::new(codec.decrypt(key_id, &bytes, &format!("{at}.data"))?);
        out.push(
            json!({"data": STANDARD.encode(&plaintext), "metadata": {"encoding": JSON_PLAIN}}),
        );
    }
    Ok(json!({ "payloads": out }))
}

/// `POST /codec/encode` (§9.2): each `json/plain` payload (or one without an encoding) is
/// encrypted with the current key into `{"data", "metadata": {"encoding": "binary/encrypted",
/// "encryption_key_id"}}`; a payload of another encoding is returned as it came.
pub fn encode_payloads(codec: &Codec, request: &Value) -> Result<Value> {
    let mut out = Vec::new();
    for (n, payload) in payloads(request)?.iter().enumerate() {
        let at = format!("payloads[{n}]");
        let (data, encoding) = payload_parts(payload, &at)?;
        if !matches!(encoding, None | Some(JSON_PLAIN)) {
            out.push(payload.clone());
            continue;
        }
        let plaintext = Zeroizing::new(STANDARD.decode(data).map_err(|_| {
            Error::field(
                ErrorCode::InvalidArgs,
                format!("{at}.data"),
                "is not standard base64",
            )
        })?);
        out.push(json!({
            "data": STANDARD.encode(codec.encrypt(&plaintext)),
            "metadata": {"encoding": ENCRYPTED, "encryption_key_id": codec.key_id()},
        }));
    }
    Ok(json!({ "payloads": out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    const K2: &str = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";

    fn codec(current: &str) -> Codec {
        Codec::from_value(&json!({"key_id": current, "keys": {"k1": K1, "k2": K2}})).unwrap()
    }

    fn job(args: &str) -> crate::job::PreparedJob {
        crate::job::prepare_json("mail.send", args, None, None, None).unwrap()
    }

    fn error_of(value: Value) -> Error {
        Codec::from_value(&value).unwrap_err()
    }

    #[test]
    fn a_sealed_job_opens_to_its_args() {
        let codec = codec("k2");
        let mut job = job(r#"[{"card": "4111111111111111"}, 2]"#);
        let plaintext_len = job.args_json.len();
        codec.seal(&mut job).unwrap();
        assert!(!job.args_json.contains("4111"), "{}", job.args_json);
        assert!(
            job.args_json
                .starts_with(r#"[{"ojs_encoded":true,"encoding":"binary/encrypted","data":""#),
            "{}",
            job.args_json
        );
        let args: Value = serde_json::from_str(&job.args_json).unwrap();
        let meta: Value = serde_json::from_str(&job.meta_json).unwrap();
        assert_eq!(meta[META_ENCODINGS], json!(["binary/encrypted"]));
        assert_eq!(meta[META_KEY_ID], "k2");
        let data = STANDARD.decode(args[0]["data"].as_str().unwrap()).unwrap();
        assert_eq!(data[0], VERSION);
        assert_eq!(data.len(), 1 + 12 + plaintext_len + 16);
        assert_eq!(
            codec.open_args(&args, &meta).unwrap(),
            Some(json!([{"card": "4111111111111111"}, 2]))
        );
        assert_eq!(codec.open_args(&json!([1]), &json!({})).unwrap(), None);
    }

    #[test]
    fn a_job_sealed_with_a_rotated_out_key_still_opens() {
        let mut job = job("[1]");
        codec("k1").seal(&mut job).unwrap();
        let args: Value = serde_json::from_str(&job.args_json).unwrap();
        let meta: Value = serde_json::from_str(&job.meta_json).unwrap();
        assert_eq!(meta[META_KEY_ID], "k1");
        assert_eq!(
            codec("k2").open_args(&args, &meta).unwrap(),
            Some(json!([1]))
        );
    }

    #[test]
    fn tampered_data_and_unknown_keys_fail_without_showing_the_data() {
        let codec = codec("k2");
        let mut job = job(r#"["secret-value"]"#);
        codec.seal(&mut job).unwrap();
        let args: Value = serde_json::from_str(&job.args_json).unwrap();
        let meta: Value = serde_json::from_str(&job.meta_json).unwrap();
        let data = args[0]["data"].as_str().unwrap();
        let seen = |error: Error| {
            assert!(!error.message.contains("secret-value"), "{error}");
            assert!(!error.message.contains(data), "{error}");
            error
        };
        let mut bytes = STANDARD.decode(data).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = json!([{"ojs_encoded": true, "encoding": ENCRYPTED,
            "data": STANDARD.encode(&bytes)}]);
        let error = seen(codec.open_args(&tampered, &meta).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidArgs);
        assert!(error.message.contains("does not authenticate"), "{error}");

        let mut meta_k9 = meta.clone();
        meta_k9[META_KEY_ID] = json!("k9");
        let error = seen(codec.open_args(&args, &meta_k9).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidConfig);
        assert!(error.message.contains("\"k9\""), "{error}");

        bytes[0] = 2;
        let versioned = json!([{"ojs_encoded": true, "encoding": ENCRYPTED,
            "data": STANDARD.encode(&bytes)}]);
        let error = seen(codec.open_args(&versioned, &meta).unwrap_err());
        assert!(error.message.contains("0x02"), "{error}");

        let not_base64 = json!([{"ojs_encoded": true, "encoding": ENCRYPTED, "data": "%%%"}]);
        let error = seen(codec.open_args(&not_base64, &meta).unwrap_err());
        assert_eq!(error.field.as_deref(), Some("args[0].data"));

        let error = seen(codec.open_args(&args, &json!({})).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidMeta);

        // The other ring, same id: authentication fails.
        let other = Codec::from_value(&json!({"key_id": "k2", "keys": {"k2": K1}})).unwrap();
        let error = seen(other.open_args(&args, &meta).unwrap_err());
        assert!(error.message.contains("does not authenticate"), "{error}");
    }

    #[test]
    fn two_seals_of_the_same_args_differ() {
        let codec = codec("k1");
        let (mut a, mut b) = (job("[1]"), job("[1]"));
        codec.seal(&mut a).unwrap();
        codec.seal(&mut b).unwrap();
        assert_ne!(a.args_json, b.args_json);
    }

    #[test]
    fn sealing_refuses_codec_meta_and_encoded_args_and_rechecks_the_size() {
        let codec = codec("k1");
        let mut job = crate::job::prepare_json(
            "mail.send",
            "[1]",
            None,
            Some(r#"{"ojs.codec.key_id": "x"}"#),
            None,
        )
        .unwrap();
        assert_eq!(
            codec.seal(&mut job).unwrap_err().code,
            ErrorCode::InvalidMeta
        );
        let mut job = crate::job::prepare_json(
            "mail.send",
            r#"[{"ojs_encoded": true, "data": "x"}]"#,
            None,
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            codec.seal(&mut job).unwrap_err().code,
            ErrorCode::InvalidArgs
        );

        // 900 KiB of args fit as plaintext; encrypted and in base64 they do not.
        let big = format!(r#"["{}"]"#, "a".repeat(900 * 1024));
        let mut job = self::job(&big);
        let before = job.clone();
        let error = codec.seal(&mut job).unwrap_err();
        assert_eq!(error.code, ErrorCode::PayloadTooLarge);
        assert_eq!(error.field.as_deref(), Some("args"));
        assert_eq!(job, before, "a refused seal leaves the job as it was");
    }

    #[test]
    fn configuration_errors_name_the_field_and_never_the_key() {
        let short = STANDARD.encode([7u8; 16]);
        let cases = [
            (json!("k1"), "adapter.encryption", ""),
            (
                json!({"keys": {"k1": K1}}),
                "adapter.encryption.key_id",
                "required",
            ),
            (
                json!({"key_id": "k1"}),
                "adapter.encryption.keys",
                "required",
            ),
            (
                json!({"key_id": "k1", "keys": {}}),
                "adapter.encryption.keys",
                "no key",
            ),
            (
                json!({"key_id": "k3", "keys": {"k1": K1}}),
                "adapter.encryption.key_id",
                "\"k3\" is not one of",
            ),
            (
                json!({"key_id": "k1", "keys": {"k1": short}}),
                "adapter.encryption.keys.k1",
                "16 bytes",
            ),
            (
                json!({"key_id": "k1", "keys": {"k1": "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE"}}),
                "adapter.encryption.keys.k1",
                "URL-safe base64 is not accepted",
            ),
            (
                json!({"key_id": "k1", "keys": {"k1": "_wEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="}}),
                "adapter.encryption.keys.k1",
                "standard base64",
            ),
            (
                json!({"key_id": "k1", "keys": {"k1": 5}}),
                "adapter.encryption.keys.k1",
                "must be a string",
            ),
            (
                json!({"key_id": "k 1", "keys": {"k 1": K1}}),
                "adapter.encryption.keys.k 1",
                "not a key id",
            ),
            (
                json!({"keyId": "k1", "keys": {"k1": K1}}),
                "adapter.encryption.keyId",
                "did you mean \"key_id\"",
            ),
            (
                json!({"key_id": "k1", "keys": {"k1": K1}, "algorithm": "x"}),
                "adapter.encryption.algorithm",
                "accepted: key_id, keys",
            ),
        ];
        for (value, field, why) in cases {
            let error = error_of(value.clone());
            assert_eq!(error.code, ErrorCode::InvalidConfig, "{value}");
            assert_eq!(error.field.as_deref(), Some(field), "{value}: {error}");
            assert!(error.message.contains(why), "{value}: {error}");
            assert!(!error.message.contains(K1), "{error}");
            assert!(!error.message.contains(&short), "{error}");
        }
    }

    #[test]
    fn debug_prints_key_ids_only() {
        let codec = codec("k2");
        let text = format!("{codec:?}");
        assert_eq!(text, r#"Codec { key_id: "k2", keys: ["k1", "k2"] }"#);
        assert!(!text.contains(K1) && !text.contains("1, 1, 1"));
    }

    #[test]
    fn a_key_list_is_id_equals_base64() {
        let list = format!("k1={K1}, k2={K2}");
        let parsed =
            Codec::from_key_list("k2", &list, "OJS_ENCRYPTION_KEY_ID", "OJS_ENCRYPTION_KEYS")
                .unwrap();
        assert_eq!(parsed, codec("k2"));
        assert_ne!(parsed, codec("k1"));
        let error =
            Codec::from_key_list("k1", "k1", "OJS_ENCRYPTION_KEY_ID", "OJS_ENCRYPTION_KEYS")
                .unwrap_err();
        assert_eq!(error.field.as_deref(), Some("OJS_ENCRYPTION_KEYS"));
        let error = Codec::from_key_list(
            "k1",
            &format!("k1={K1},k1={K2}"),
            "OJS_ENCRYPTION_KEY_ID",
            "OJS_ENCRYPTION_KEYS",
        )
        .unwrap_err();
        assert!(error.message.contains("more than once"), "{error}");
        assert!(!error.message.contains(K2));
    }

    #[test]
    fn the_codec_server_bodies_round_trip() {
        let (old, new) = (codec("k1"), codec("k2"));
        let plain = STANDARD.encode(br#"{"customer_id":"cust_123"}"#);
        let request =
            json!({"payloads": [{"data": plain, "metadata": {"encoding": "json/plain"}}]});
        let encoded = encode_payloads(&old, &request).unwrap();
        let payload = &encoded["payloads"][0];
        assert_eq!(
            payload["metadata"],
            json!({"encoding": "binary/encrypted", "encryption_key_id": "k1"})
        );
        let decoded = decode_payloads(&new, &encoded).unwrap();
        assert_eq!(
            decoded,
            json!({"payloads": [{"data": plain, "metadata": {"encoding": "json/plain"}}]})
        );

        // A sealed job's envelope data is a payload's data.
        let mut job = job(r#"[{"a": 1}]"#);
        new.seal(&mut job).unwrap();
        let args: Value = serde_json::from_str(&job.args_json).unwrap();
        let decoded = decode_payloads(
            &new,
            &json!({"payloads": [{"data": args[0]["data"], "metadata": {"encoding": ENCRYPTED, "encryption_key_id": "k2"}}]}),
        )
        .unwrap();
        assert_eq!(
            STANDARD
                .decode(decoded["payloads"][0]["data"].as_str().unwrap())
                .unwrap(),
            br#"[{"a": 1}]"#
        );

        let error = decode_payloads(
            &new,
            &json!({"payloads": [{"data": "AQ==", "metadata": {"encoding": ENCRYPTED}}]}),
        )
        .unwrap_err();
        assert_eq!(
            error.field.as_deref(),
            Some("payloads[0].metadata.encryption_key_id")
        );
        assert!(decode_payloads(&new, &json!({})).is_err());
    }
}
