//! The memo: what a queue worker's in-memory index is wrapped in, so
//! that a message delivered again to the same process (its
//! acknowledgement lost or not yet made) gets its first verdict. The NATS
//! and Kafka workers use it with `--index memory`; an index in Redis keeps
//! its own memo, shared by the fleet.

use std::collections::HashMap;

use crate::engine::{Ask, IndexStats, IndexStore, Verdict};
use crate::error::StoreError;

/// Verdicts the in-memory memo keeps at most (see [`Memo`]): far more
/// than the messages a worker has in hand.
const MEMO_LIMIT: usize = 1 << 20;

/// An index store that remembers each token's verdict until it is
/// forgotten: the in-memory index remembers none, and a message delivered
/// again to this process (its acknowledgement lost) must get its first
/// verdict, not be "a duplicate of itself". An index in Redis keeps its own
/// memo, shared by the fleet, and needs no wrapper.
#[derive(Debug)]
pub struct Memo<S> {
    /// The store that decides what the memo does not know.
    pub inner: S,
    verdicts: HashMap<Vec<u8>, Verdict>,
}

impl<S> Memo<S> {
    /// A memo in front of `inner`.
    pub fn new(inner: S) -> Memo<S> {
        Memo {
            inner,
            verdicts: HashMap::new(),
        }
    }
}

impl<S: IndexStore> IndexStore for Memo<S> {
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        let fresh: Vec<Ask<'_>> = asks
            .iter()
            .filter(|ask| ask.token.is_none_or(|t| !self.verdicts.contains_key(t)))
            .copied()
            .collect();
        let mut decided = Vec::with_capacity(fresh.len());
        self.inner.decide(&fresh, &mut decided)?;
        if self.verdicts.len() > MEMO_LIMIT {
            // Only tokens whose acknowledgement failed stay here; past the
            // limit they are dropped (their republish is still dropped by
            // the output stream's duplicate window).
            self.verdicts.clear();
        }
        let mut decided = decided.into_iter();
        for ask in asks {
            let remembered = ask.token.and_then(|t| self.verdicts.get(t)).cloned();
            let verdict = match remembered {
                Some(verdict) => verdict,
                None => {
                    let verdict = decided.next().ok_or_else(|| {
                        StoreError::Unavailable("the index store lost a verdict".into())
                    })?;
                    if let Some(token) = ask.token {
                        self.verdicts.insert(token.to_vec(), verdict.clone());
                    }
                    verdict
                }
            };
            verdicts.push(verdict);
        }
        Ok(())
    }

    fn stats(&self) -> IndexStats {
        self.inner.stats()
    }

    fn forget(&mut self, tokens: &[&[u8]]) {
        for token in tokens {
            self.verdicts.remove(*token);
        }
        self.inner.forget(tokens);
    }
}
