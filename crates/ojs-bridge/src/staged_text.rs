//! [`Staged`] as one NUL-separated text, for a binding that keeps the INSERT texts it was sent
//! ([`KeptTexts`]). A bulk's INSERT text is the same for every call of a dialect, placeholder
//! style, row count and row shape (29 kB for 1,000 jobs): sending it once, and the parameters
//! without JSON escaping, is what makes a bulk cost about what the rows cost to write (Node on
//! SQLite, issue 16). `Staged::to_json` stays the encoding of the bindings that parse JSON.

use crate::Staged;

/// How many INSERT texts a binding-side stager keeps (the least recently used one goes).
/// Bulks of a few sizes and shapes stay sent once; a workload of ever new sizes pays one text
/// per call, as with `Staged::to_json`.
pub const KEPT_TEXTS: usize = 8;

/// The INSERT texts one binding-side stager holds, by key (`0..KEPT_TEXTS`): the binding keeps
/// exactly the texts [`Staged::encode`] told it to keep, under the keys it named. One per
/// binding-side stager, used from one thread.
#[derive(Debug, Default)]
pub struct KeptTexts {
    texts: Vec<Kept>,
    calls: u64,
}

#[derive(Debug)]
struct Kept {
    sql: String,
    last_used: u64,
}

impl KeptTexts {
    pub fn new() -> KeptTexts {
        KeptTexts::default()
    }

    /// The key of `sql` and whether the binding already holds it; a new text takes a free key,
    /// else the least recently used one's.
    fn key_of(&mut self, sql: &str) -> (usize, bool) {
        self.calls += 1;
        let now = self.calls;
        if let Some(key) = self.texts.iter().position(|kept| kept.sql == sql) {
            self.texts[key].last_used = now;
            return (key, true);
        }
        let kept = Kept {
            sql: sql.to_owned(),
            last_used: now,
        };
        if self.texts.len() < KEPT_TEXTS {
            self.texts.push(kept);
            return (self.texts.len() - 1, false);
        }
        let (key, _) = self
            .texts
            .iter()
            .enumerate()
            .min_by_key(|(_, kept)| kept.last_used)
            .expect("KEPT_TEXTS > 0");
        self.texts[key] = kept;
        (key, false)
    }
}

impl Staged {
    /// The staged jobs' one text for a binding holding `kept`, fields separated by NUL:
    /// `needs_savepoint` (`1` or `0`), the job ids as one [`encode_ids`](crate::encode_ids)
    /// text, then per statement: its text's key, the text itself when the binding does not
    /// hold it yet under that key (else empty: a text is never empty), the parameter count,
    /// the indexes of the NULL parameters joined by `,` (usually empty), and the parameters.
    /// The binding stores a text sent with a key under that key, replacing what it held. No
    /// field can hold a NUL (see `StagedJob::encode`); a parameter may be empty (a tenant).
    pub fn encode(&self, kept: &mut KeptTexts) -> String {
        let params: usize = self
            .statements
            .iter()
            .flat_map(|statement| &statement.params)
            .map(|param| param.as_deref().map_or(1, str::len) + 1)
            .sum();
        let ids: usize = self.job_ids.iter().map(|id| id.len() + 1).sum();
        let mut out = String::with_capacity(2 + ids + params + 16 * self.statements.len());
        out.push(if self.needs_savepoint { '1' } else { '0' });
        out.push('\0');
        for (index, id) in self.job_ids.iter().enumerate() {
            if index > 0 {
                out.push('\n');
            }
            out.push_str(id);
        }
        for statement in &self.statements {
            let (key, held) = kept.key_of(&statement.sql);
            let nulls: Vec<String> = statement
                .params
                .iter()
                .enumerate()
                .filter(|(_, param)| param.is_none())
                .map(|(index, _)| index.to_string())
                .collect();
            out.push('\0');
            out.push_str(&key.to_string());
            out.push('\0');
            if !held {
                out.push_str(&statement.sql);
            }
            out.push('\0');
            out.push_str(&statement.params.len().to_string());
            out.push('\0');
            out.push_str(&nulls.join(","));
            for param in &statement.params {
                out.push('\0');
                out.push_str(param.as_deref().unwrap_or(""));
            }
        }
        out
    }
}
