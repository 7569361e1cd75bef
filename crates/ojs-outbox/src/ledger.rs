//! The after-commit bookkeeping of one transaction: which staged job ids wake the relay, and
//! when. A savepoint's ids join the enclosing level when it is released and are dropped when
//! it rolls back; only the outermost commit hands them over, all at once. The one copy of the
//! rule spec §12.4 asks for, used by the Rust-native transaction (`OutboxTransaction`) and by
//! the bindings whose host library has no savepoint-aware after-commit hook (knex).

use crate::error::{Error, ErrorCode, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// Ids staged at each nesting level; `levels[0]` is the outermost transaction. Empty once
    /// the transaction has ended.
    levels: Vec<Vec<String>>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}

impl Ledger {
    /// The ledger of a transaction just begun (one level, nothing staged).
    pub fn new() -> Ledger {
        Ledger {
            levels: vec![Vec::new()],
        }
    }

    /// Open levels: 1 in the outermost transaction, +1 per open savepoint, 0 once ended.
    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    /// Records ids staged at the innermost open level.
    pub fn staged<I: IntoIterator<Item = String>>(&mut self, job_ids: I) -> Result<()> {
        self.levels.last_mut().ok_or_else(ended)?.extend(job_ids);
        Ok(())
    }

    /// A savepoint was opened.
    pub fn savepoint(&mut self) -> Result<()> {
        if self.levels.is_empty() {
            return Err(ended());
        }
        self.levels.push(Vec::new());
        Ok(())
    }

    /// The innermost savepoint was released: its ids now belong to the enclosing level.
    pub fn release(&mut self) -> Result<()> {
        self.require_savepoint()?;
        let released = self.levels.pop().expect("checked");
        self.levels
            .last_mut()
            .expect("the outermost level remains")
            .extend(released);
        Ok(())
    }

    /// The innermost savepoint was rolled back: its ids are dropped.
    pub fn rollback_savepoint(&mut self) -> Result<()> {
        self.require_savepoint()?;
        self.levels.pop();
        Ok(())
    }

    /// The outermost transaction committed: every id still recorded, in staging order (the
    /// ledger is then ended). Open savepoints count as released, as COMMIT releases them.
    pub fn commit(&mut self) -> Vec<String> {
        self.levels.drain(..).flatten().collect()
    }

    /// The outermost transaction rolled back: nothing wakes the relay (the ledger is ended).
    pub fn rollback(&mut self) {
        self.levels.clear();
    }

    /// `Ok` when a savepoint is open (to check before running RELEASE / ROLLBACK TO).
    pub fn require_savepoint(&self) -> Result<()> {
        match self.levels.len() {
            0 => Err(ended()),
            1 => Err(Error::new(ErrorCode::NoTransaction, "no savepoint is open")),
            _ => Ok(()),
        }
    }
}

fn ended() -> Error {
    Error::new(ErrorCode::NoTransaction, "the transaction has ended")
}

/// Whether staging these statements needs a savepoint of its own: several INSERTs (a bulk
/// larger than one statement) must be all or nothing like one, so a failure part-way is rolled
/// back to the savepoint and the caller's transaction stays usable.
pub fn needs_savepoint(statement_count: usize) -> bool {
    statement_count > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn released_savepoints_join_the_parent_and_rolled_back_ones_vanish() {
        let mut ledger = Ledger::new();
        ledger.staged(ids(&["a"])).unwrap();
        ledger.savepoint().unwrap();
        ledger.staged(ids(&["b"])).unwrap();
        ledger.savepoint().unwrap();
        ledger.staged(ids(&["c"])).unwrap();
        ledger.rollback_savepoint().unwrap();
        ledger.release().unwrap();
        ledger.savepoint().unwrap();
        ledger.staged(ids(&["d"])).unwrap();
        assert_eq!(ledger.depth(), 2);
        assert_eq!(ledger.commit(), ids(&["a", "b", "d"]));
        assert_eq!(ledger.depth(), 0);
    }

    #[test]
    fn an_outer_rollback_drops_released_savepoints_too() {
        let mut ledger = Ledger::new();
        ledger.savepoint().unwrap();
        ledger.staged(ids(&["a"])).unwrap();
        ledger.release().unwrap();
        ledger.rollback();
        assert_eq!(ledger.commit(), Vec::<String>::new());
    }

    #[test]
    fn misuse_is_a_no_transaction_error() {
        let mut ledger = Ledger::new();
        assert_eq!(ledger.release().unwrap_err().code, ErrorCode::NoTransaction);
        assert_eq!(
            ledger.rollback_savepoint().unwrap_err().code,
            ErrorCode::NoTransaction
        );
        ledger.commit();
        assert_eq!(
            ledger.staged(ids(&["late"])).unwrap_err().code,
            ErrorCode::NoTransaction
        );
        assert_eq!(
            ledger.savepoint().unwrap_err().code,
            ErrorCode::NoTransaction
        );
    }

    #[test]
    fn only_several_statements_need_a_savepoint() {
        assert!(!needs_savepoint(1));
        assert!(needs_savepoint(2));
    }
}
