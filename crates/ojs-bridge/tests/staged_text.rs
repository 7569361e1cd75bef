//! `Staged::encode`: the staged jobs as one NUL-separated text for a binding that keeps the
//! INSERT texts (Node's `stageJobs`), decoded here as the binding decodes it
//! (bindings-node/lib/staged.js), against what `Staged` holds.

use std::collections::HashMap;

use ojs_bridge::{Bridge, KEPT_TEXTS, KeptTexts, Staged};
use serde_json::json;

fn adapter() -> Bridge {
    let config = json!({"adapter": {"ojs_url": "http://127.0.0.1:9"}}).to_string();
    Bridge::new(&config).unwrap()
}

/// What a binding holds: the texts by key, as the encoding told it to keep them.
#[derive(Default)]
struct Binding {
    texts: HashMap<String, String>,
}

struct Decoded {
    needs_savepoint: bool,
    ids: String,
    /// Each statement's text, whether it came in the text (not held yet), and its parameters.
    statements: Vec<(String, bool, Vec<Option<String>>)>,
}

impl Binding {
    fn decode(&mut self, text: &str) -> Decoded {
        let fields: Vec<&str> = text.split('\0').collect();
        let mut statements = Vec::new();
        let mut at = 2;
        while at < fields.len() {
            let (key, sent) = (fields[at], fields[at + 1]);
            if !sent.is_empty() {
                self.texts.insert(key.to_owned(), sent.to_owned());
            }
            let sql = self.texts[key].clone();
            let count: usize = fields[at + 2].parse().unwrap();
            let nulls: Vec<usize> = fields[at + 3]
                .split(',')
                .filter(|index| !index.is_empty())
                .map(|index| index.parse().unwrap())
                .collect();
            let params = fields[at + 4..at + 4 + count]
                .iter()
                .enumerate()
                .map(|(index, param)| (!nulls.contains(&index)).then(|| (*param).to_owned()))
                .collect();
            statements.push((sql, !sent.is_empty(), params));
            at += 4 + count;
        }
        Decoded {
            needs_savepoint: fields[0] == "1",
            ids: fields[1].to_owned(),
            statements,
        }
    }

    /// Encodes `staged` for this binding and checks the decoded text against it; returns
    /// whether each statement's text came with it.
    fn receive(&mut self, staged: &Staged, kept: &mut KeptTexts) -> Vec<bool> {
        let decoded = self.decode(&staged.encode(kept));
        assert_eq!(decoded.needs_savepoint, staged.needs_savepoint);
        assert_eq!(decoded.ids, ojs_bridge::encode_ids(&staged.job_ids));
        assert_eq!(decoded.statements.len(), staged.statements.len());
        for ((sql, _, params), statement) in decoded.statements.iter().zip(&staged.statements) {
            assert_eq!(sql, &statement.sql);
            assert_eq!(params, &statement.params);
        }
        decoded
            .statements
            .iter()
            .map(|(_, sent, _)| *sent)
            .collect()
    }
}

fn bulk(count: usize) -> String {
    let jobs: Vec<_> = (0..count)
        .map(|index| json!({"type": "bench.job", "args": [index]}))
        .collect();
    serde_json::Value::Array(jobs).to_string()
}

#[test]
fn a_bulk_text_crosses_once_and_its_parameters_every_time() {
    let adapter = adapter();
    let mut kept = KeptTexts::new();
    let mut binding = Binding::default();
    let jobs = bulk(1000);
    let first = adapter.stage("sqlite", "question", &jobs, None).unwrap();
    assert_eq!(binding.receive(&first, &mut kept), [true]);
    let again = adapter.stage("sqlite", "question", &jobs, None).unwrap();
    assert_ne!(again.job_ids, first.job_ids, "fresh ids");
    assert_eq!(
        binding.receive(&again, &mut kept),
        [false],
        "the text is held"
    );

    // Another row shape (options, a tenant, a quote and a newline in the args) is another text.
    let mixed = json!([
        {"type": "a", "args": ["it's\nfine"], "options": {"queue": "email"}},
        {"type": "b", "args": [], "meta": {"tenant_id": ""}},
    ])
    .to_string();
    let staged = adapter.stage("sqlite", "question", &mixed, None).unwrap();
    assert_eq!(binding.receive(&staged, &mut kept), [true]);
    assert_eq!(binding.receive(&again, &mut kept), [false]);
}

#[test]
fn a_null_parameter_is_named_and_an_empty_bulk_has_no_statement() {
    let adapter = adapter();
    let mut kept = KeptTexts::new();
    let mut binding = Binding::default();
    // One job keeps all six parameters: its tenant is a NULL.
    let one = adapter
        .stage("postgresql", "dollar", &bulk(1), None)
        .unwrap();
    assert_eq!(one.statements[0].params[5], None);
    let text = one.encode(&mut KeptTexts::new());
    assert_eq!(text.split('\0').nth(5), Some("5"), "the NULL's index");
    binding.receive(&one, &mut kept);

    let none = adapter.stage("sqlite", "question", "[]", None).unwrap();
    assert_eq!(none.encode(&mut kept), "0\0");
    binding.receive(&none, &mut kept);
}

#[test]
fn statements_beyond_one_insert_say_they_need_a_savepoint() {
    let adapter = adapter();
    let staged = adapter
        .stage("sqlite", "question", &bulk(5001), None)
        .unwrap();
    assert_eq!(staged.statements.len(), 2);
    assert!(staged.needs_savepoint);
    let mut binding = Binding::default();
    assert_eq!(
        binding.receive(&staged, &mut KeptTexts::new()),
        [true, true]
    );
}

#[test]
fn the_least_recently_used_text_makes_room() {
    let adapter = adapter();
    let mut kept = KeptTexts::new();
    let mut binding = Binding::default();
    let stage = |count| {
        adapter
            .stage("sqlite", "question", &bulk(count), None)
            .unwrap()
    };
    for count in 2..2 + KEPT_TEXTS {
        assert_eq!(binding.receive(&stage(count), &mut kept), [true]);
    }
    // 2 rows is used again, so 3 rows is now the least recently used: a new size takes its key.
    assert_eq!(binding.receive(&stage(2), &mut kept), [false]);
    assert_eq!(binding.receive(&stage(100), &mut kept), [true]);
    assert_eq!(binding.texts.len(), KEPT_TEXTS, "keys are reused");
    assert_eq!(binding.receive(&stage(2), &mut kept), [false]);
    assert_eq!(binding.receive(&stage(4), &mut kept), [false]);
    assert_eq!(binding.receive(&stage(3), &mut kept), [true], "sent again");
}
