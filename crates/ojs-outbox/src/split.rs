//! Which rows of a refused batch go out next, and how (`relay/send.rs`, `send_batch`). Pure, so its
//! cost is counted by the unit tests below without a network.
//!
//! A refused batch answer names at most one job (`error.details.index`). The rows still to
//! settle wait in order; each step sends the front row alone (a row refused by name, for its
//! own verdict) or the next rows as one batch:
//!
//! - after a refusal naming job j, the j rows before it go next as one batch (the backend found
//!   nothing wrong with them), then job j alone unless the relay settled it from the answer,
//!   and the batches after that are at most 2(j+1) rows (about twice the run that refusal
//!   cleared) or a quarter of the refused batch, whichever is larger;
//! - after a refusal naming none, the next batch is half as large;
//! - after an accepted batch (other than such a run of rows before a named job), the next
//!   is twice as large, up to the first batch's size.
//!
//! A refused batch is at most as large as the size set by the refusal before it, doubled once
//! per accepted batch since: at most twice the rows those batches settled, plus twice the run
//! the refusal before it cleared or a quarter of that refusal's batch. Summed over a batch of n rows,
//! the refused batches carry O(n) bodies (at most 5n in every pattern the unit tests try)
//! and a row is sent a bounded number of times, whatever the mix of refused rows; before this, every
//! refusal re-sent all the rows after the named one, O(n²) for n refused rows. k refused rows
//! among n cost about 3k requests when each is named (the refused batch, the rows before it,
//! the row alone), and O(k·log n) when none is.

use std::collections::VecDeque;

/// The next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The front row, alone (`Split::pop_front`).
    Alone,
    /// The first `n` rows (at least 2) as one batch (`Split::rows`).
    Batch(usize),
}

#[derive(Debug)]
pub(crate) struct Split<T> {
    /// Rows not settled yet, in order; `true`: a refused row to send alone when it is first.
    todo: VecDeque<(T, bool)>,
    /// The first batch's size: no batch is larger.
    cap: usize,
    /// The size of the next batch, unless `clean` rows go first.
    chunk: usize,
    /// Leading rows the last refusal did not name: the next batch, whatever `chunk` is.
    clean: usize,
    /// The batch last handed out was such a run of rows (its acceptance is no news).
    prefix: bool,
}

impl<T: Copy> Split<T> {
    pub(crate) fn new(rows: impl IntoIterator<Item = T>) -> Split<T> {
        let todo: VecDeque<(T, bool)> = rows.into_iter().map(|row| (row, false)).collect();
        let cap = todo.len().max(1);
        Split {
            todo,
            cap,
            chunk: cap,
            clean: 0,
            prefix: false,
        }
    }

    /// What to send next; `None` once every row is settled.
    pub(crate) fn next(&mut self) -> Option<Step> {
        let &(_, alone) = self.todo.front()?;
        if alone {
            return Some(Step::Alone);
        }
        let run = self.todo.iter().take_while(|(_, alone)| !alone).count();
        self.prefix = self.clean > 0;
        let n = if self.prefix { self.clean } else { self.chunk }.min(run);
        self.clean = 0;
        Some(if n <= 1 { Step::Alone } else { Step::Batch(n) })
    }

    /// The first `n` rows (a `Step::Batch(n)`).
    pub(crate) fn rows(&self, n: usize) -> Vec<T> {
        self.todo.iter().take(n).map(|(row, _)| *row).collect()
    }

    /// Takes the front row (a `Step::Alone`): the caller settles it. A row that goes alone
    /// because the batches shrank to one (not one refused by name) counts as a batch: the
    /// next is twice as large.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let (row, named) = self.todo.pop_front()?;
        if !named && !self.prefix {
            self.chunk = (self.chunk * 2).min(self.cap);
        }
        Some(row)
    }

    /// The batch of the first `n` rows was accepted: they are settled.
    pub(crate) fn accepted(&mut self, n: usize) {
        self.todo.drain(..n.min(self.todo.len()));
        if !self.prefix {
            self.chunk = (self.chunk * 2).min(self.cap);
        }
    }

    /// The batch of the first `n` rows was refused, naming its job `named` or none: the named
    /// row goes alone after the rows before it.
    pub(crate) fn refused(&mut self, n: usize, named: Option<usize>) {
        match named.filter(|&j| j < n.min(self.todo.len())) {
            Some(j) => {
                self.todo[j].1 = true;
                self.after_named(n, j);
            }
            None => {
                self.clean = 0;
                self.chunk = (n / 2).max(1);
            }
        }
    }

    /// The batch of the first `n` rows was refused naming job `j`, and the caller settled that
    /// row from the answer: it leaves, and the rows before it go next.
    pub(crate) fn resolved(&mut self, n: usize, j: usize) -> Option<T> {
        if j >= n.min(self.todo.len()) {
            return None;
        }
        let (row, _) = self.todo.remove(j)?;
        self.after_named(n, j);
        Some(row)
    }

    /// After a batch of `n` refused naming job `j`: the rows before it next, then batches of
    /// about twice the run it cleared, but no less than a quarter of the refused batch (one
    /// refused row at the front must not make the rest crawl back from a batch of two).
    fn after_named(&mut self, n: usize, j: usize) {
        self.clean = j;
        self.chunk = (2 * (j + 1)).max(n / 4).clamp(1, self.cap);
    }

    /// Every row not settled yet, in order.
    pub(crate) fn all(&self) -> Vec<T> {
        self.todo.iter().map(|(row, _)| *row).collect()
    }

    /// Keeps the rows for which `keep` says so (after the caller settled the others), and
    /// starts again with batches of the first size: what refused the last batch has left.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(T) -> bool) {
        self.todo.retain(|(row, _)| keep(*row));
        self.clean = 0;
        self.chunk = self.cap;
    }

    /// Takes every row not settled yet (the caller releases them or settles them otherwise).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.todo.drain(..).map(|(row, _)| row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a batch of `n` rows costs when the rows in `bad` are refused (each refusal names
    /// the first refused row of a batch when `named`), as the relay drives `Split`: requests,
    /// bodies, and the most times one row was sent.
    fn cost(n: usize, bad: &[usize], named: bool) -> (usize, usize, usize) {
        let mut split = Split::new(0..n);
        let (mut requests, mut bodies) = (0, 0);
        let mut sent = vec![0; n];
        let mut settled = 0;
        while let Some(step) = split.next() {
            requests += 1;
            match step {
                Step::Alone => {
                    let row = split.pop_front().unwrap();
                    bodies += 1;
                    sent[row] += 1;
                    settled += 1;
                }
                Step::Batch(size) => {
                    let rows = split.rows(size);
                    assert_eq!(rows.len(), size);
                    bodies += size;
                    for &row in &rows {
                        sent[row] += 1;
                    }
                    match rows.iter().position(|row| bad.contains(row)) {
                        None => {
                            split.accepted(size);
                            settled += size;
                        }
                        Some(j) => split.refused(size, Some(j).filter(|_| named)),
                    }
                }
            }
        }
        assert_eq!(settled, n, "every row settled once");
        (requests, bodies, sent.into_iter().max().unwrap_or(0))
    }

    fn every(n: usize, step: usize, from: usize) -> Vec<usize> {
        (from..n).step_by(step).collect()
    }

    #[test]
    fn a_clean_batch_is_one_request() {
        assert_eq!(cost(1000, &[], true), (1, 1000, 1));
        assert_eq!(cost(1, &[], true), (1, 1, 1));
        assert_eq!(cost(0, &[], true), (0, 0, 0));
    }

    #[test]
    fn named_refusals_cost_about_three_requests_each() {
        // The refused batch, the rows before the named one, that row alone (and the rest).
        assert!(cost(1000, &[500], true).0 <= 4);
        assert!(cost(1000, &every(1000, 100, 50), true).0 <= 31);
        assert_eq!(cost(1000, &[0], true).0, 5);
    }

    #[test]
    fn unnamed_refusals_cost_about_two_log_n_requests_each() {
        // 2k·log2(n) + 1.
        assert!(
            cost(1000, &[500], false).0 <= 21,
            "{:?}",
            cost(1000, &[500], false)
        );
        let ten = every(1000, 100, 50);
        assert!(
            cost(1000, &ten, false).0 <= 201,
            "{:?}",
            cost(1000, &ten, false)
        );
    }

    #[test]
    fn bodies_stay_linear_whatever_the_mix() {
        let n = 1000;
        let patterns: Vec<(&str, Vec<usize>)> = vec![
            ("none", vec![]),
            ("one", vec![500]),
            ("ten spread", every(n, 100, 50)),
            ("every 7th", every(n, 7, 3)),
            ("every 3rd", every(n, 3, 1)),
            ("every other", every(n, 2, 0)),
            ("all", (0..n).collect()),
            ("the first half", (0..n / 2).collect()),
            ("the last half", (n / 2..n).collect()),
            ("the last", vec![n - 1]),
            (
                "clusters",
                (0..n).filter(|i| (i / 50) % 3 == 0 && i % 5 == 0).collect(),
            ),
        ];
        for (name, bad) in &patterns {
            for named in [true, false] {
                let (requests, bodies, most) = cost(n, bad, named);
                println!(
                    "{name}, named {named}: {requests} requests, {bodies} bodies, a row sent at most {most} times"
                );
                assert!(
                    bodies <= 5 * n,
                    "{name}, named {named}: {bodies} bodies, {requests} requests"
                );
                // A named refusal clears a run; halving sends a row once per level.
                let times = if named { 8 } else { 20 };
                assert!(
                    most <= times,
                    "{name}, named {named}: a row sent {most} times"
                );
                // About 3 requests per refused row when named (4 for dense ones), 2·log2(n)
                // when not.
                let per_row = if named { 4 } else { 20 };
                assert!(
                    requests <= per_row * bad.len() + 11,
                    "{name}, named {named}: {requests} requests for {} refused",
                    bad.len()
                );
            }
        }
    }

    #[test]
    fn a_row_settled_from_the_answer_leaves_and_the_rows_before_it_go_next() {
        let mut split = Split::new(0..10);
        assert_eq!(split.next(), Some(Step::Batch(10)));
        assert_eq!(split.resolved(10, 4), Some(4));
        assert_eq!(split.next(), Some(Step::Batch(4)));
        assert_eq!(split.rows(4), vec![0, 1, 2, 3]);
        split.accepted(4);
        // Then at most 2·(4 + 1) rows.
        assert_eq!(split.next(), Some(Step::Batch(5)));
        assert_eq!(split.rows(5), vec![5, 6, 7, 8, 9]);
        split.retain(|row| row % 2 == 1);
        assert_eq!(split.all(), vec![5, 7, 9]);
        assert_eq!(split.next(), Some(Step::Batch(3)));
        assert_eq!(split.drain(), vec![5, 7, 9]);
        assert_eq!(split.next(), None);
    }
}
