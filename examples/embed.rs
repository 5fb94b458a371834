//! Embedding the engine in a Rust consumer with the `Stream` adapter.
//!
//! Reads JSON lines from stdin, writes only the new ones (the deduplicated
//! stream) to stdout, and reports duplicates on stderr. With a state file
//! argument, the index is loaded before and saved after, so successive runs
//! share it.
//!
//! ```text
//! cargo run --example embed -- [STATE_FILE] < fixtures/retweet_storm.jsonl
//! ```

use std::io::{BufRead, Write};
use std::path::PathBuf;

use futures::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use dedup_stream::state::snapshot::{self, Loaded};
use dedup_stream::{Deduper, EngineConfig, FieldSpec, Verdict};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let state = std::env::args_os().nth(1).map(PathBuf::from);
    let mut deduper = Deduper::new(EngineConfig::default())?;
    if let Some(path) = &state
        && let Loaded::Restored(n) = snapshot::load(path, &mut deduper)?
    {
        eprintln!("loaded {n} messages from {}", path.display());
    }

    // Any stream of lines will do: a Kafka consumer's payloads, a channel...
    // Here, stdin read on a thread of its own into a bounded channel.
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1024);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().split(b'\n') {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    let lines = ReceiverStream::new(rx);
    let mut tagged = dedup_stream::pipeline::stream::dedup(lines, deduper, FieldSpec::default());

    let mut stdout = std::io::stdout().lock();
    while let Some(item) = tagged.next().await {
        match item {
            Ok(message) => match &message.verdict {
                // A deletion notice is passed on: whoever reads must honour
                // it too.
                Verdict::New | Verdict::Deleted { .. } => stdout.write_all(&message.line)?,
                Verdict::Duplicate(m) => {
                    eprintln!("{} duplicates {} ({})", message.id, m.of, m.similarity)
                }
                // Sent again (a run resumed from --state): passed on
                // already, or reported, the first time.
                Verdict::Repeat(_) => eprintln!("{} was seen before", message.id),
            },
            Err(invalid) => eprintln!("skipped {invalid}"),
        }
    }
    stdout.flush()?;

    let deduper = tagged.into_deduper();
    if let Some(path) = &state {
        snapshot::save(path, &deduper)?;
        eprintln!(
            "saved {} messages to {}",
            deduper.index().len(),
            path.display()
        );
    }
    Ok(())
}
