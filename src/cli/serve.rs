//! `dedup-stream serve`: the sidecar's listeners, state file, journal and
//! index store wired to [`dedup_stream::server`], until a signal.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8};

use crate::cli::args::{ServeArgs, StateArgs};
use dedup_stream::engine::{IndexStore, Preparer};
use dedup_stream::metrics::Metrics;
use dedup_stream::redis_index::IndexLocation;
use dedup_stream::server::{self, Listeners};
use dedup_stream::state::journal::{self, Journal, JournalError, SnapshotId};
use dedup_stream::state::output::{self, OutputKind};
use dedup_stream::state::snapshot::{self, Saveable};
use dedup_stream::{Decoder, Deduper, EngineConfig, Error, FieldSpec};

use crate::{Exit, NOT_FRESH, load_state_checked, runtime, stop_on_signal, usage};

/// `dedup-stream serve`: bind, serve until SIGTERM or SIGINT, drain, save.
pub fn serve(args: &ServeArgs) -> Exit {
    let config = match args.server_config() {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    if let Some(path) = &args.state.state
        && let Err(e) = output::check(&[(OutputKind::State, path)], &[], false)
    {
        return usage(e);
    }
    if let Err(e) = crate::cli::scale::refuse_memory_only(&args.index, &args.state) {
        return usage(e);
    }
    if args.explain && !matches!(args.index.index, IndexLocation::Memory) {
        return usage("--explain needs the index in memory (--index memory)");
    }
    let engine = match args.engine_config() {
        Ok(engine) => engine,
        Err(e) => return usage(e),
    };
    let preparer = Preparer::new(&engine);
    let metrics = Arc::new(Metrics::default());
    let stop = Arc::new(AtomicBool::new(false));
    match &args.index.index {
        IndexLocation::Memory => {
            let (mut deduper, journal) =
                match load_with_journal(&args.state, engine, &preparer, &config.fields) {
                    Ok(loaded) => loaded,
                    Err(exit) => return exit,
                };
            deduper.set_explain(args.explain);
            match runtime() {
                Ok(runtime) => run_server_with(
                    args, config, preparer, deduper, runtime, metrics, stop, journal,
                ),
                Err(exit) => exit,
            }
        }
        location => {
            let options = crate::cli::scale::index_options(&args.index, &stop, &metrics);
            let store = match crate::cli::scale::open_index(
                location,
                &args.index.in_redis.index_name,
                &engine,
                options,
            ) {
                Ok(store) => store,
                Err(exit) => return exit,
            };
            match runtime() {
                Ok(runtime) => run_server(args, config, preparer, store, runtime, metrics, stop),
                Err(exit) => exit,
            }
        }
    }
}

/// A new engine with `--state` loaded and its journal replayed into it,
/// and the journal, open for appending (none without `--state`): for the
/// filter and `serve`.
pub fn load_with_journal(
    state: &StateArgs,
    engine: EngineConfig,
    preparer: &Preparer,
    fields: &FieldSpec,
) -> Result<(Deduper, Option<Journal>), Exit> {
    let fingerprint = snapshot::fingerprint(&engine);
    let deduper = Deduper::new(engine).map_err(usage)?;
    let Some(path) = &state.state else {
        return Ok((deduper, None));
    };
    // The state file's id before it is loaded: the journal follows it.
    let base = SnapshotId::of_file(path).unwrap_or(SnapshotId::NONE);
    let (mut deduper, loaded) = load_state_checked(state, deduper)?;
    let base = if loaded { base } else { SnapshotId::NONE };
    let journal = open_journal(
        state,
        path,
        base,
        fingerprint,
        preparer,
        fields,
        &mut deduper,
    )?;
    Ok((deduper, journal))
}

/// Opens `--state`'s journal and replays it into `deduper` (see
/// [`dedup_stream::state::journal`]); a journal that cannot be read stops the
/// server as a bad state file does, unless `--fresh-state`.
fn open_journal(
    args: &StateArgs,
    state: &Path,
    base: SnapshotId,
    fingerprint: u64,
    preparer: &Preparer,
    fields: &FieldSpec,
    deduper: &mut Deduper,
) -> Result<Option<Journal>, Exit> {
    let decoder = Decoder::new(fields.clone());
    let mut opened = journal::open(
        state,
        base,
        fingerprint,
        args.fsync,
        deduper,
        preparer,
        &decoder,
    );
    if let Err(e @ (JournalError::NotAJournal { .. } | JournalError::Settings { .. })) = &opened {
        if !args.fresh_state {
            eprintln!("dedup-stream: {e}");
            if args.offer_fresh_state {
                eprintln!(
                    "dedup-stream: the file was left as it is; pass --fresh-state to start \
                     without it (it is replaced)"
                );
            } else {
                eprintln!("dedup-stream: the file was left as it is; {NOT_FRESH}");
            }
            return Err(Exit::Failure);
        }
        tracing::warn!("{e}; replaced (--fresh-state)");
        let _ = std::fs::remove_file(journal::path_for(state));
        opened = journal::open(
            state,
            base,
            fingerprint,
            args.fsync,
            deduper,
            preparer,
            &decoder,
        );
    }
    match opened {
        Ok((journal, replayed)) => {
            if replayed.dropped_bytes > 0 {
                tracing::warn!(
                    path = %journal.path().display(),
                    bytes = replayed.dropped_bytes,
                    "the journal ended with a torn or corrupt record (a write cut short): dropped"
                );
            }
            if replayed.unrelated {
                tracing::warn!(
                    path = %journal.path().display(),
                    "the journal does not follow this state file (replaced, or started afresh): \
                     set aside unread, as FILE.journal.unrelated"
                );
            }
            if replayed.messages > 0 {
                tracing::info!(
                    path = %journal.path().display(),
                    messages = replayed.messages,
                    "journal replayed"
                );
            }
            Ok(Some(journal))
        }
        // The journal was read and replayed, but its new copy cannot be
        // written (a full or read-only disk): the run goes on without one,
        // as it does when a write fails later, and the old file is kept
        // for the next start.
        Err(JournalError::Io { path, source })
            if matches!(
                source.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::ReadOnlyFilesystem
            ) =>
        {
            tracing::warn!(
                path = %path.display(),
                error = %source,
                "cannot write the journal: going on without it (a crash loses what is indexed \
                 until the state file is saved)"
            );
            Ok(None)
        }
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            Err(Exit::Failure)
        }
    }
}

fn run_server<S>(
    args: &ServeArgs,
    config: server::ServerConfig,
    preparer: Preparer,
    store: S,
    runtime: tokio::runtime::Runtime,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Exit
where
    S: IndexStore + Saveable + Send + 'static,
{
    run_server_with(args, config, preparer, store, runtime, metrics, stop, None)
}

#[allow(clippy::too_many_arguments)]
fn run_server_with<S>(
    args: &ServeArgs,
    config: server::ServerConfig,
    preparer: Preparer,
    store: S,
    runtime: tokio::runtime::Runtime,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    journal: Option<Journal>,
) -> Exit
where
    S: IndexStore + Saveable + Send + 'static,
{
    let signal = Arc::new(AtomicU8::new(0));
    let result = runtime.block_on(async {
        // Before anything listens: a signal from here on drains and stops.
        let shutdown = stop_on_signal(Arc::clone(&signal), stop);
        let mut listeners = Listeners::default();
        for address in &args.listen {
            listeners.data.push(address.bind().await?);
        }
        let bind = |address: std::net::SocketAddr| async move {
            tokio::net::TcpListener::bind(address)
                .await
                .map_err(|source| Error::Listen {
                    address: address.to_string(),
                    source,
                })
        };
        if let Some(admin) = args.admin {
            listeners.admin = Some(bind(admin).await?);
        }
        if let Some(address) = args.listen_http {
            listeners.http = Some(bind(address).await?);
        }
        server::run_with_journal(
            config, preparer, store, listeners, shutdown, metrics, journal,
        )
        .await
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // A service stopped by either signal has drained and saved: that is a
    // clean stop for its supervisor, so both exit 0 (the filter, run by
    // hand, reports Ctrl-C as 130 instead).
    match result {
        Ok(_) => Exit::Success,
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            Exit::Failure
        }
    }
}
