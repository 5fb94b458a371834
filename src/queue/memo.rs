//! The memo: what a queue worker's in-memory index is wrapped in, so
//! that a message delivered again to the same process (its
//! acknowledgement lost or not yet made) gets its first verdict. Every
//! queue worker uses it with `--index memory`; an index in Redis keeps its
//! own memo, shared by the fleet.

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
    /// Hashed with foldhash rather than SipHash: a token is a broker's
    /// sequence or offset, not a key an attacker picks, and SipHash's three
    /// hashes a message (look up, insert, forget) cost about 800
    /// instructions of a worker's thread.
    verdicts: foldhash::HashMap<Vec<u8>, Verdict>,
}

impl<S> Memo<S> {
    /// A memo in front of `inner`.
    pub fn new(inner: S) -> Memo<S> {
        Memo {
            inner,
            verdicts: foldhash::HashMap::default(),
        }
    }
}

impl<S: IndexStore> IndexStore for Memo<S> {
    fn decide(&mut self, asks: &[Ask<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), StoreError> {
        if self.verdicts.len() > MEMO_LIMIT {
            // Only tokens whose acknowledgement failed stay here; past the
            // limit they are dropped (their republish is still dropped by
            // the output stream's duplicate window). Before the look-ups
            // below, which must hold until the batch is answered.
            self.verdicts.clear();
        }
        // Whether each ask's token is remembered, looked up once.
        let remembered: Vec<bool> = asks
            .iter()
            .map(|ask| ask.token.is_some_and(|t| self.verdicts.contains_key(t)))
            .collect();
        let fresh: Vec<Ask<'_>> = asks
            .iter()
            .zip(&remembered)
            .filter(|&(_, &remembered)| !remembered)
            .map(|(ask, _)| *ask)
            .collect();
        let mut decided = Vec::with_capacity(fresh.len());
        self.inner.decide(&fresh, &mut decided)?;
        let mut decided = decided.into_iter();
        for (ask, remembered) in asks.iter().zip(remembered) {
            let remembered = match ask.token {
                Some(token) if remembered => self.verdicts.get(token).cloned(),
                _ => None,
            };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Deduper;
    use crate::engine::config::EngineConfig;
    use crate::metrics::Metrics;
    use crate::queue::batch::{self, Lines, Payload};
    use crate::wire::record::{Decoder, FieldSpec, MessageId};

    /// The verdicts `memo` gives `payloads` under `tokens`, as ids (`New`,
    /// or the id of the message it duplicates), and how many the index
    /// found repeated (answered by the index, not the memo).
    fn verdicts(
        memo: &mut Memo<Deduper>,
        payloads: &[&str],
        tokens: &[&[u8]],
    ) -> (Vec<String>, u64) {
        let preparer = memo.inner.preparer().clone();
        let decoder = Decoder::new(FieldSpec::default());
        let payloads: Vec<Option<&[u8]>> = payloads.iter().map(|p| Some(p.as_bytes())).collect();
        let prepared = batch::prepare((&preparer, &decoder), Lines::new(&payloads, 1 << 20));
        let (decided, tally) = batch::decide(memo, prepared, tokens, &Metrics::default()).unwrap();
        let ids = (0..payloads.len())
            .map(|at| match decided.payload(at) {
                Payload::Message(_, Verdict::Duplicate(m)) => match &m.of {
                    MessageId::Integer(id) => id.to_string(),
                    other => format!("{other:?}"),
                },
                Payload::Message(_, verdict) => format!("{verdict:?}"),
                _ => "?".into(),
            })
            .collect();
        (ids, tally.repeats)
    }

    /// A token delivered again among new ones gets its first verdict, and
    /// the new ones around it get theirs: the memo's answers and the
    /// index's stay in step.
    #[test]
    fn a_token_delivered_again_among_new_ones_keeps_every_verdict_in_place() {
        // An index of one message: by the time t2 comes again, the index
        // has let go of the message it duplicated, and only the memo can
        // answer as the first time.
        let config = EngineConfig {
            capacity: std::num::NonZeroUsize::new(1).unwrap(),
            ..EngineConfig::default()
        };
        let mut memo = Memo::new(Deduper::new(config).unwrap());
        let river = |id: u32| {
            format!(
                r#"{{"id":{id},"text":"the river burst its banks at dawn and the town is cut off"}}"#
            )
        };
        let storm = |id: u32| {
            format!(r#"{{"id":{id},"text":"a storm closed every road into the valley overnight"}}"#)
        };
        let first = verdicts(&mut memo, &[&river(1), &river(2)], &[b"t1", b"t2"]);
        assert_eq!(first.0, ["New", "1"]);
        // t2 again (its acknowledgement lost) between two new messages: it
        // keeps "a duplicate of 1"; the storm's copy is a duplicate of the
        // storm before it.
        let second = verdicts(
            &mut memo,
            &[&storm(3), &river(2), &storm(4)],
            &[b"t3", b"t2", b"t4"],
        );
        assert_eq!(second.0, ["New", "1", "3"]);
        // Forgotten, t2 goes to the index, which no longer holds 1.
        memo.forget(&[b"t2"]);
        let third = verdicts(&mut memo, &[&river(2)], &[b"t2"]);
        assert_eq!(third.0, ["New"]);
    }
}
