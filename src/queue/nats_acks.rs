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
    window: Window,
}

/// The publishes from the oldest not yet claimed on, by serial: about the
/// publishes in flight.
#[derive(Default)]
struct Window {
    /// The serial of `slots`' first.
    base: u64,
    slots: VecDeque<Slot>,
}

/// A publish's place in the [`Window`].
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
            window: Window::default(),
        })
    }

    /// Publishes `payload` with `headers` to `subject`; returns the serial
    /// by which [`Acks::wait`] finds what became of it. A publish the
    /// client refuses (over `max_payload`, or its connection closed) has
    /// its answer at once.
    pub async fn publish(&mut self, subject: Subject, headers: HeaderMap, payload: Bytes) -> u64 {
        let serial = self.window.next();
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(serial);
        let mut reply = String::with_capacity(self.prefix.len() + digits.len());
        reply.push_str(&self.prefix);
        reply.push_str(digits);
        let sent = self
            .client
            .publish_with_reply_and_headers(subject, Subject::from(reply), headers, payload)
            .await;
        self.window.open(match sent {
            Ok(()) => None,
            Err(e) if e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded => {
                Some(Stored::TooLarge(e.to_string()))
            }
            Err(e) => Some(Stored::Failed(e.to_string())),
        })
    }

    /// What became of each of `serials` (as [`Acks::publish`] returned
    /// them), in order, waiting at most `within` for their answers: one
    /// not answered by then has [`Stored::Failed`].
    pub async fn wait(&mut self, serials: &[u64], within: Duration) -> Vec<Stored> {
        let deadline = tokio::time::Instant::now() + within;
        let mut gone = None;
        'serials: for serial in serials {
            while self.window.awaits(*serial) {
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
        self.window.claim(serials, &unanswered)
    }

    /// Files an answer under its publish, if that is still awaited.
    fn take(&mut self, message: async_nats::Message) {
        let serial = message
            .subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|serial| serial.parse::<u64>().ok());
        if let Some(serial) = serial.filter(|&serial| self.window.awaits(serial)) {
            self.window.answer(serial, read(&message));
        }
    }
}

impl Window {
    /// The serial the next publish gets.
    fn next(&self) -> u64 {
        self.base + self.slots.len() as u64
    }

    /// A slot for the next publish, answered already if `answer` is some;
    /// its serial.
    fn open(&mut self, answer: Option<Stored>) -> u64 {
        let serial = self.next();
        self.slots
            .push_back(answer.map_or(Slot::Sent, Slot::Answered));
        serial
    }

    /// The slot of a serial still in the window.
    fn slot(&mut self, serial: u64) -> Option<&mut Slot> {
        let at = usize::try_from(serial.checked_sub(self.base)?).ok()?;
        self.slots.get_mut(at)
    }

    /// Whether `serial` is sent and not yet answered or claimed.
    fn awaits(&mut self, serial: u64) -> bool {
        matches!(self.slot(serial), Some(Slot::Sent))
    }

    /// Files `stored` as the answer to `serial`, if that still awaits one:
    /// an answer after its publish was claimed (given up) is dropped.
    fn answer(&mut self, serial: u64, stored: Stored) {
        if let Some(slot @ Slot::Sent) = self.slot(serial) {
            *slot = Slot::Answered(stored);
        }
    }

    /// The answers of `serials`, each then claimed; [`Stored::Failed`] with
    /// `unanswered` for one with none. The window then starts at the oldest
    /// not claimed.
    fn claim(&mut self, serials: &[u64], unanswered: &str) -> Vec<Stored> {
        let stored = serials
            .iter()
            .map(|&serial| {
                match self
                    .slot(serial)
                    .map(|slot| std::mem::replace(slot, Slot::Claimed))
                {
                    Some(Slot::Answered(stored)) => stored,
                    _ => Stored::Failed(unanswered.to_string()),
                }
            })
            .collect();
        while matches!(self.slots.front(), Some(Slot::Claimed)) {
            self.slots.pop_front();
            self.base += 1;
        }
        stored
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
    fn answers_find_their_publish_in_any_order_and_late_ones_are_dropped() {
        let mut window = Window::default();
        let stored = |duplicate| Stored::Yes { duplicate };
        let first: Vec<u64> = (0..3).map(|_| window.open(None)).collect();
        let second: Vec<u64> = (0..2).map(|_| window.open(None)).collect();
        let refused = window.open(Some(Stored::TooLarge("big".into())));
        assert_eq!(
            (first.clone(), second.clone(), refused),
            (vec![0, 1, 2], vec![3, 4], 5)
        );
        // Answers of the second batch come first, and one twice.
        window.answer(4, stored(false));
        window.answer(3, stored(true));
        window.answer(3, stored(false));
        window.answer(0, stored(false));
        window.answer(2, stored(true));
        assert!(window.awaits(1) && !window.awaits(0) && !window.awaits(5));
        assert_eq!(
            window.claim(&first, "none"),
            [stored(false), Stored::Failed("none".into()), stored(true)]
        );
        // Claimed: the window starts at the second batch, and the answer
        // to the publish given up is dropped, not filed anywhere.
        assert_eq!(window.base, 3);
        window.answer(1, stored(false));
        assert!(!window.awaits(1));
        // Its publish again, under a new serial.
        let again = window.open(None);
        assert_eq!(again, 6);
        window.answer(again, stored(true));
        assert_eq!(window.claim(&second, "none"), [stored(true), stored(false)]);
        assert_eq!(
            window.claim(&[refused, again], "none"),
            [Stored::TooLarge("big".into()), stored(true)]
        );
        assert_eq!((window.base, window.slots.len()), (7, 0));
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
