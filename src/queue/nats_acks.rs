//! The NATS worker's publishes and their acknowledgements, matched on one
//! subscription.
//!
//! JetStream answers a message published with a reply subject to a
//! stream's subject by a publish acknowledgement sent to that subject:
//! `{"stream":..,"seq":..}` once stored (with `"duplicate":true` when its
//! `Nats-Msg-Id` was stored before), or `{"error":..}`. The client's
//! JetStream publish makes a request of each message: an inbox subject, a
//! channel, a permit and a timer of its own, and an untagged enum read
//! from the answer, about 5,000 instructions a message on the worker's
//! thread, more than deciding it. Here every publish's reply subject is
//! `PREFIX.SERIAL` under one wildcard subscription, and an answer finds
//! its publish by the serial: one slot a message, in a window of the
//! serials not yet claimed.
//!
//! The guarantees are the request's: a publish is stored only when its
//! acknowledgement says so; one not answered within the wait (lost with a
//! connection, say) counts as failed and is published again under the same
//! `Nats-Msg-Id`, which the output stream stores once. An answer that comes
//! after its publish was given up is dropped.

use std::collections::VecDeque;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::{Client, HeaderMap, StatusCode, Subject, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// Publish acknowledgements that may wait, unread, on the subscription:
/// the client's buffer for one subscription (its default, set explicitly
/// by [`super::nats::connect`]), past which it drops messages.
pub const ACK_ROOM: usize = 64 * 1024;

/// What became of one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Stored in its stream; `duplicate`: its `Nats-Msg-Id` was already.
    Yes {
        /// The stream had a message with its id: this one was dropped.
        duplicate: bool,
    },
    /// Refused for its size (over `max_payload`, or its stream's
    /// `max_msg_size`): sending it again would be refused again.
    TooLarge(String),
    /// Not stored for now (no answer, no stream, a connection lost): may be
    /// published again.
    Failed(String),
}

/// Publishes whose acknowledgements are awaited, by serial.
pub struct Acks {
    client: Client,
    subscriber: Subscriber,
    /// `INBOX.`: a publish's reply subject is this and its serial.
    prefix: String,
    /// The serial of `slots`' first.
    base: u64,
    /// Every publish from `base` on, in serial order: the window ends at the
    /// oldest not yet claimed by [`Acks::wait`], so it holds about the
    /// publishes in flight.
    slots: VecDeque<Slot>,
}

/// A publish's place in [`Acks`].
enum Slot {
    /// Sent; no answer yet.
    Sent,
    /// Answered, not yet claimed.
    Answered(Stored),
    /// Claimed (or given up): a late answer is dropped.
    Claimed,
}

impl Acks {
    /// Subscribes to the acknowledgements of `client`'s publishes, under a
    /// new inbox subject (the client's inbox prefix, which permissions may
    /// require).
    pub async fn new(client: &Client) -> Result<Acks, async_nats::SubscribeError> {
        let prefix = format!("{}.", client.new_inbox());
        let subscriber = client.subscribe(format!("{prefix}*")).await?;
        Ok(Acks {
            client: client.clone(),
            subscriber,
            prefix,
            base: 0,
            slots: VecDeque::new(),
        })
    }

    /// Publishes `payload` with `headers` to `subject`; returns the serial
    /// by which [`Acks::wait`] finds what became of it. A publish the
    /// client refuses (over `max_payload`, or its connection closed) has
    /// its answer at once.
    pub async fn publish(&mut self, subject: Subject, headers: HeaderMap, payload: Bytes) -> u64 {
        let serial = self.base + self.slots.len() as u64;
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(serial);
        let mut reply = String::with_capacity(self.prefix.len() + digits.len());
        reply.push_str(&self.prefix);
        reply.push_str(digits);
        let sent = self
            .client
            .publish_with_reply_and_headers(subject, Subject::from(reply), headers, payload)
            .await;
        self.slots.push_back(match sent {
            Ok(()) => Slot::Sent,
            Err(e) if e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                Slot::Answered(Stored::TooLarge(e.to_string()))
            }
            Err(e) => Slot::Answered(Stored::Failed(e.to_string())),
        });
        serial
    }

    /// What became of each of `serials` (as [`Acks::publish`] returned
    /// them), in order, waiting at most `within` for their answers: one
    /// not answered by then has [`Stored::Failed`].
    pub async fn wait(&mut self, serials: &[u64], within: Duration) -> Vec<Stored> {
        let deadline = tokio::time::Instant::now() + within;
        let mut gone = None;
        'serials: for serial in serials {
            while matches!(self.slot(*serial), Some(Slot::Sent)) {
                match tokio::time::timeout_at(deadline, self.subscriber.next()).await {
                    Ok(Some(message)) => self.take(message),
                    Ok(None) => {
                        gone = Some("the client closed the subscription of acknowledgements");
                        break 'serials;
                    }
                    Err(_) => break 'serials,
                }
            }
        }
        let unanswered = gone.map_or_else(
            || {
                format!(
                    "no publish acknowledgement within {} s",
                    within.as_secs_f64()
                )
            },
            str::to_string,
        );
        let stored = serials
            .iter()
            .map(|&serial| {
                match self
                    .slot(serial)
                    .map(|slot| std::mem::replace(slot, Slot::Claimed))
                {
                    Some(Slot::Answered(stored)) => stored,
                    _ => Stored::Failed(unanswered.clone()),
                }
            })
            .collect();
        while matches!(self.slots.front(), Some(Slot::Claimed)) {
            self.slots.pop_front();
            self.base += 1;
        }
        stored
    }

    /// The slot of a serial still in the window.
    fn slot(&mut self, serial: u64) -> Option<&mut Slot> {
        let at = usize::try_from(serial.checked_sub(self.base)?).ok()?;
        self.slots.get_mut(at)
    }

    /// Files an answer under its publish, if that is still awaited.
    fn take(&mut self, message: async_nats::Message) {
        let serial = message
            .subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|serial| serial.parse::<u64>().ok());
        if let Some(slot @ Slot::Sent) = serial.and_then(|serial| self.slot(serial)) {
            *slot = Slot::Answered(read(&message));
        }
    }
}

/// A publish acknowledgement as JetStream sends it; other fields are
/// skipped.
#[derive(Deserialize)]
struct Answer {
    /// Present in every acknowledgement of a stored message.
    stream: Option<IgnoredAny>,
    #[serde(default)]
    duplicate: bool,
    error: Option<jetstream::Error>,
}

/// What an answer to a publish says of it.
fn read(message: &async_nats::Message) -> Stored {
    match message.status {
        None | Some(StatusCode::OK) => {}
        Some(StatusCode::NO_RESPONDERS) => {
            return Stored::Failed("no stream takes the subject (no responders)".into());
        }
        Some(status) => {
            return Stored::Failed(format!(
                "answered with status {status}{}",
                message
                    .description
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            ));
        }
    }
    match serde_json::from_slice::<Answer>(&message.payload) {
        Ok(Answer { error: Some(e), .. })
            if e.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM =>
        {
            Stored::TooLarge(e.to_string())
        }
        Ok(Answer { error: Some(e), .. }) => Stored::Failed(e.to_string()),
        Ok(Answer {
            stream: Some(_),
            duplicate,
            ..
        }) => Stored::Yes { duplicate },
        Ok(Answer { stream: None, .. }) => Stored::Failed(format!(
            "not a publish acknowledgement: {}",
            String::from_utf8_lossy(&message.payload[..message.payload.len().min(200)])
        )),
        Err(e) => Stored::Failed(format!("an unreadable publish acknowledgement: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(payload: &'static str, status: Option<StatusCode>) -> Stored {
        read(&async_nats::Message {
            subject: Subject::from("_INBOX.x.1"),
            reply: None,
            payload: Bytes::from_static(payload.as_bytes()),
            headers: None,
            status,
            description: None,
            length: payload.len(),
        })
    }

    #[test]
    fn acknowledgements_read_as_stored_duplicate_too_large_or_failed() {
        assert_eq!(
            answer(r#"{"stream":"OUT","seq":7}"#, None),
            Stored::Yes { duplicate: false }
        );
        assert_eq!(
            answer(
                r#"{"stream":"OUT","domain":"d","seq":7,"duplicate":true}"#,
                None
            ),
            Stored::Yes { duplicate: true }
        );
        let too_large = answer(
            r#"{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}"#,
            None,
        );
        assert!(
            matches!(&too_large, Stored::TooLarge(why) if why.contains("exceeds maximum")),
            "{too_large:?}"
        );
        let other = answer(
            r#"{"error":{"code":503,"err_code":10077,"description":"resource limits exceeded"}}"#,
            None,
        );
        assert!(matches!(other, Stored::Failed(_)), "{other:?}");
        assert!(matches!(
            answer("", Some(StatusCode::NO_RESPONDERS)),
            Stored::Failed(_)
        ));
        assert!(matches!(answer("{}", None), Stored::Failed(_)));
        assert!(matches!(answer("not json", None), Stored::Failed(_)));
    }
}
