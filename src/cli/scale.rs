//! The scale-out commands' wiring: opening an index in Redis for the
//! filter and the sidecar, `dedup-stream consume` and `dedup-stream index`.
//! The logic lives in the library (`redis_index`, `consume`).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use dedup_stream::engine::{IndexStore, Preparer};
use dedup_stream::metrics::Metrics;
use dedup_stream::queue::{self, kafka, nats, redis_streams};
use dedup_stream::redis_index::{IndexLocation, Link, RedisIndex, RedisOptions, admin};
use dedup_stream::server;
use dedup_stream::state::output::OutputKind;
use dedup_stream::state::{output, snapshot};
use dedup_stream::{Deduper, EngineConfig, Error, StoreError};

use crate::cli::args::{
    ConsumeArgs, ForgetArgs, IndexAction, IndexAdminArgs, IndexArgs, RedisArgs, StateArgs,
};
use crate::{Exit, load_state, runtime, stop_on_signal, usage};

/// Options for an index in memory only: a state file (with Redis, its
/// persistence keeps the index) and a byte budget (Redis's memory is
/// bounded by --capacity, and by Redis).
pub fn refuse_memory_only(index: &IndexArgs, state: &StateArgs) -> Result<(), String> {
    if index.index == IndexLocation::Memory {
        return Ok(());
    }
    if state.state.is_some() {
        return Err(format!(
            "--state keeps an index in memory; with --index {} Redis keeps the index, so use \
             Redis persistence (appendonly yes, or RDB snapshots) instead (README: Scaling out)",
            index.index
        ));
    }
    if index.max_index_bytes.is_some() {
        return Err(format!(
            "--max-index-bytes bounds an index in memory; with --index {} bound the index with \
             --capacity (README: Scaling out gives its bytes per message), and give Redis a \
             maxmemory above that with maxmemory-policy noeviction",
            index.index
        ));
    }
    Ok(())
}

/// The options of an index in Redis that the filter and `serve` take.
pub fn index_options(
    index: &IndexArgs,
    stop: &Arc<AtomicBool>,
    metrics: &Arc<Metrics>,
) -> RedisOptions {
    redis_options(&index.in_redis, stop, metrics, None)
}

/// The options of an index in Redis, from the options every mode takes
/// for it; `token_scope`: a queue worker's (see [`RedisOptions`]).
fn redis_options(
    in_redis: &RedisArgs,
    stop: &Arc<AtomicBool>,
    metrics: &Arc<Metrics>,
    token_scope: Option<String>,
) -> RedisOptions {
    RedisOptions {
        metrics: Some(Arc::clone(metrics)),
        stop: Some(Arc::clone(stop)),
        token_scope,
        timeout: Some(in_redis.redis_timeout),
        wait: in_redis.redis_wait.0,
        snapshot_every: in_redis.log_snapshot_every,
        threads: None,
    }
}

/// Opens (creating if need be) the index `name` in Redis; reports a failure
/// on stderr.
pub fn open_index(
    location: &IndexLocation,
    name: &str,
    config: &EngineConfig,
    options: RedisOptions,
) -> Result<RedisIndex, Exit> {
    match RedisIndex::open(location, name, config, options) {
        Ok(index) => {
            tracing::info!(index = name, redis = %location, settings = index.settings(), "index opened");
            Ok(index)
        }
        Err(e @ (StoreError::Name(_) | StoreError::Location { .. })) => Err(usage(e)),
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            Err(Exit::Failure)
        }
    }
}

/// Says on stderr (at `-v`) what the index store's work took.
pub fn report_store(metrics: &Metrics) {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let calls = get(&metrics.store_calls);
    if calls > 0 {
        tracing::info!(
            round_trips = calls,
            errors = get(&metrics.store_errors),
            appended = get(&metrics.log_appended),
            applied_from_others = get(&metrics.log_applied),
            reappends = get(&metrics.log_reappends),
            resyncs = get(&metrics.log_resyncs),
            snapshots = get(&metrics.log_snapshots),
            "index in Redis"
        );
    }
}

/// This machine's name, for the default consumer name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "dedup-stream".into())
}

/// `dedup-stream consume`.
pub fn consume(args: &ConsumeArgs) -> Exit {
    if args.nats.is_some() {
        return consume_nats(args);
    }
    if args.kafka.is_some() {
        return consume_kafka(args);
    }
    let engine = match args.engine_config() {
        Ok(engine) => engine,
        Err(e) => return usage(e),
    };
    let config = match args.consume_config(format!("{}-{}", hostname(), std::process::id())) {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    if args.state.state.is_some() {
        return usage(
            "--state keeps an index in memory for a NATS worker; with --redis the index lives in \
             Redis (or in memory for this run only)",
        );
    }
    let streams = match args
        .redis
        .as_deref()
        .unwrap_or_default()
        .parse::<IndexLocation>()
    {
        Ok(location @ IndexLocation::Redis(_)) => location,
        Ok(location) => {
            return usage(format!(
                "--redis {location}: the streams' Redis must be one server (redis://HOST:PORT[/DB], \
                 rediss://… or redis+unix:///PATH)"
            ));
        }
        Err(e) => return usage(e),
    };
    let index_location = args.index.clone().unwrap_or_else(|| streams.clone());
    let worker = match Worker::start(args, engine) {
        Ok(worker) => worker,
        Err(exit) => return exit,
    };
    let mut link = match Link::new(&streams, args.in_redis.redis_timeout) {
        Ok(link) => link
            .with_wait(args.in_redis.redis_wait.0)
            .with_metrics(Arc::clone(&worker.metrics))
            .with_stop(Arc::clone(&worker.stop)),
        Err(e) => return usage(e),
    };
    let lines: Option<Box<dyn io::Write + Send>> = match config.output {
        redis_streams::Output::Lines => Some(unbuffered_stdout()),
        redis_streams::Output::Stream(_) => None,
    };
    tracing::info!(
        stream = %config.stream,
        group = %config.group,
        consumer = %config.consumer,
        index = %index_location,
        "consuming"
    );
    let (preparer, stop, metrics) = (&worker.preparer, &worker.stop, &worker.metrics);
    let result = match &index_location {
        IndexLocation::Memory => Deduper::new(worker.engine.clone())
            .map_err(Error::Config)
            .and_then(|mut deduper| {
                redis_streams::run(
                    &config,
                    preparer,
                    &mut deduper,
                    &mut link,
                    lines,
                    stop,
                    metrics,
                )
            }),
        location => {
            let scope = format!("q:{}:{}", config.stream, config.group);
            let mut store = match worker.open_index(args, location, scope) {
                Ok(store) => store,
                Err(exit) => return exit,
            };
            // Lines on stdout cannot be taken back: after a crash of a
            // Redis that lost its last second, an entry printed from a lost
            // log entry is decided again, perhaps otherwise.
            if lines.is_some() && store.writes_are_durable() == Some(false) {
                tracing::warn!(
                    "--output -: the index's Redis does not make each write durable before it \
                     answers (appendfsync always): if it crashes, lines printed in its last \
                     second may be printed again with another verdict; set appendfsync always, \
                     or write to an output stream (docs/scaling.md)"
                );
            }
            redis_streams::run(
                &config, preparer, &mut store, &mut link, lines, stop, metrics,
            )
        }
    };
    worker.finish(args, result, |e| match e {
        // Nothing is lost: what was not acknowledged stays pending, and is
        // read again by this consumer or claimed by another.
        Error::Store(StoreError::Unavailable(_)) => {
            Ending::Stopped("unacknowledged entries stay pending")
        }
        _ => Ending::Failure,
    })
}

/// Stdout with no buffer of ours between the worker's writes and the
/// descriptor, so that each write of whole lines is one `write(2)` (see
/// `redis_streams::run`): a copy of the descriptor. Where it cannot be copied,
/// the standard handle (line-buffered, which writes whole lines too).
fn unbuffered_stdout() -> Box<dyn io::Write + Send> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        if let Ok(fd) = io::stdout().as_fd().try_clone_to_owned() {
            return Box::new(std::fs::File::from(fd));
        }
    }
    Box::new(io::stdout())
}

/// What every queue worker starts with, once its own arguments are
/// checked: the engine, the metrics, the stop flag, and the runtime that
/// turns signals into that flag and serves `--admin`.
struct Worker {
    engine: EngineConfig,
    preparer: Preparer,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    runtime: tokio::runtime::Runtime,
}

/// How a worker's error ends the run.
enum Ending {
    /// A clean stop after all (told to stop while the broker was away):
    /// exit 0, saying what becomes of what was not acknowledged.
    Stopped(&'static str),
    /// A usage error (exit 2).
    Usage,
    /// Exit 1.
    Failure,
}

impl Worker {
    /// Starts the runtime, the signal handler and `--admin`.
    fn start(args: &ConsumeArgs, engine: EngineConfig) -> Result<Worker, Exit> {
        let preparer = Preparer::new(&engine);
        let metrics = Arc::new(Metrics::default());
        metrics.queue_worker.store(true, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let runtime = runtime()?;
        let signal = Arc::new(AtomicU8::new(0));
        // Listening from here on, before the worker reads anything.
        let on_signal = {
            let _entered = runtime.enter();
            stop_on_signal(Arc::clone(&signal), Arc::clone(&stop))
        };
        runtime.spawn(on_signal);
        start_admin(args, &runtime, &metrics, &stop)?;
        Ok(Worker {
            engine,
            preparer,
            metrics,
            stop,
            runtime,
        })
    }

    /// A NATS or Kafka worker's broker settings (from `settings`), where
    /// its index lives, and the worker started.
    fn with_index<C>(
        args: &ConsumeArgs,
        settings: impl FnOnce(&ConsumeArgs) -> Result<C, String>,
    ) -> Result<(C, IndexLocation, Worker), Exit> {
        let engine = args.engine_config().map_err(usage)?;
        let settings = settings(args).map_err(usage)?;
        let location = Worker::index_location(args)?;
        Ok((settings, location, Worker::start(args, engine)?))
    }

    /// Where a NATS or Kafka worker's index lives: memory unless `--index`
    /// says Redis, where `--state` (a file of the index in memory) has no
    /// place.
    fn index_location(args: &ConsumeArgs) -> Result<IndexLocation, Exit> {
        let location = args.index.clone().unwrap_or(IndexLocation::Memory);
        if location != IndexLocation::Memory && args.state.state.is_some() {
            return Err(usage(format!(
                "--state keeps an index in memory; with --index {location} Redis keeps it"
            )));
        }
        if let Some(path) = &args.state.state
            && let Err(e) = output::check(&[(OutputKind::State, path)], &[], false)
        {
            return Err(usage(e));
        }
        Ok(location)
    }

    /// The index in Redis, its tokens under `scope` (one per input, so
    /// that workers of other inputs do not share their memos).
    fn open_index(
        &self,
        args: &ConsumeArgs,
        location: &IndexLocation,
        scope: String,
    ) -> Result<RedisIndex, Exit> {
        let options = redis_options(&args.in_redis, &self.stop, &self.metrics, Some(scope));
        open_index(location, &args.in_redis.index_name, &self.engine, options)
    }

    /// The index in memory, from `--state` if given, in a memo (a message
    /// delivered again in this process gets its first verdict); `run` runs
    /// the worker on it, and the index is saved to `--state` after.
    fn in_memory<T>(
        &self,
        args: &ConsumeArgs,
        run: impl FnOnce(&mut queue::Memo<Deduper>) -> T,
    ) -> Result<T, Exit> {
        let deduper = Deduper::new(self.engine.clone()).map_err(usage)?;
        let mut store = queue::Memo::new(load_state(&args.state, deduper)?);
        let result = run(&mut store);
        if let Some(path) = &args.state.state
            && let Err(e) = snapshot::save(path, &store.inner)
        {
            eprintln!("dedup-stream: {e}");
            return Err(Exit::Failure);
        }
        Ok(result)
    }

    /// Runs `run` on the worker's index: in memory (see
    /// [`Worker::in_memory`]) or in Redis, its tokens under `scope`.
    fn on_store<T>(
        &self,
        args: &ConsumeArgs,
        location: &IndexLocation,
        scope: String,
        run: impl FnOnce(&mut dyn IndexStore) -> T,
    ) -> Result<T, Exit> {
        match location {
            IndexLocation::Memory => self.in_memory(args, |store| run(store)),
            location => self
                .open_index(args, location, scope)
                .map(|mut store| run(&mut store)),
        }
    }

    /// Stops the runtime, reports the store's work and the run's summary,
    /// and ends as `ending` says for an error.
    fn finish<S: std::fmt::Display, E: std::fmt::Display>(
        self,
        args: &ConsumeArgs,
        result: Result<S, E>,
        ending: impl FnOnce(&E) -> Ending,
    ) -> Exit {
        self.runtime
            .shutdown_timeout(std::time::Duration::from_secs(1));
        report_store(&self.metrics);
        let e = match result {
            Ok(summary) => {
                if !args.quiet {
                    eprintln!("dedup-stream: {summary}");
                }
                return Exit::Success;
            }
            Err(e) => e,
        };
        match ending(&e) {
            Ending::Stopped(what) if self.stop.load(Ordering::Relaxed) => {
                eprintln!("dedup-stream: {e}; {what}");
                Exit::Success
            }
            Ending::Usage => usage(e),
            Ending::Stopped(_) | Ending::Failure => {
                eprintln!("dedup-stream: {e}");
                Exit::Failure
            }
        }
    }
}

/// Serves `--admin` (health and metrics) on the runtime until `stop`.
fn start_admin(
    args: &ConsumeArgs,
    runtime: &tokio::runtime::Runtime,
    metrics: &Arc<Metrics>,
    stop: &Arc<AtomicBool>,
) -> Result<(), Exit> {
    let Some(address) = args.admin else {
        return Ok(());
    };
    let listener = match runtime.block_on(tokio::net::TcpListener::bind(address)) {
        Ok(listener) => listener,
        Err(source) => {
            let e = Error::Listen {
                address: address.to_string(),
                source,
            };
            eprintln!("dedup-stream: {e}");
            return Err(Exit::Failure);
        }
    };
    tracing::info!(address = %address, "admin endpoint listening");
    let stopped = Arc::clone(stop);
    runtime.spawn(server::serve_admin(
        listener,
        Arc::clone(metrics),
        async move {
            while !stopped.load(Ordering::Relaxed) {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        },
    ));
    Ok(())
}

/// `dedup-stream consume --nats`: the worker on this thread, its client
/// on the binary's runtime (which also serves the admin endpoint and
/// signals), with the index in memory (and `--state`) or in Redis.
fn consume_nats(args: &ConsumeArgs) -> Exit {
    let ((server, config), index_location, worker) =
        match Worker::with_index(args, ConsumeArgs::nats_config) {
            Ok(started) => started,
            Err(exit) => return exit,
        };
    tracing::info!(
        nats = %server,
        stream = %config.stream,
        subject = %config.subject,
        durable = %config.durable,
        output = %config.output_subject,
        index = %index_location,
        "consuming"
    );
    let client = match worker.runtime.block_on(nats::connect(&server)) {
        Ok(client) => client,
        Err(e @ nats::NatsError::Location { .. }) => return usage(e),
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            return Exit::Failure;
        }
    };
    let (preparer, stop, metrics) = (&worker.preparer, &worker.stop, &worker.metrics);
    let scope = nats::token_scope(&config);
    let runtime = worker.runtime.handle();
    let result = match worker.on_store(args, &index_location, scope, |store| {
        nats::run(runtime, client, &config, preparer, store, stop, metrics)
    }) {
        Ok(result) => result,
        Err(exit) => return exit,
    };
    worker.finish(args, result, |e| match e {
        // Nothing is lost: what was not acknowledged is delivered again.
        nats::NatsError::Unavailable(_) => {
            Ending::Stopped("unacknowledged messages will be delivered again")
        }
        _ => Ending::Failure,
    })
}

/// `dedup-stream consume --kafka`: the worker of `consume_kafka` (on this
/// thread; the runtime serves the admin endpoint and signals), with the
/// index in memory (and `--state`) or in Redis.
fn consume_kafka(args: &ConsumeArgs) -> Exit {
    let ((brokers, config), index_location, worker) =
        match Worker::with_index(args, ConsumeArgs::kafka_config) {
            Ok(started) => started,
            Err(exit) => return exit,
        };
    tracing::info!(
        kafka = %brokers,
        topics = ?config.topics,
        group = %config.group,
        output = %config.output_topic,
        index = %index_location,
        "consuming"
    );
    let (preparer, stop, metrics) = (&worker.preparer, &worker.stop, &worker.metrics);
    let scope = kafka::token_scope(&config);
    let result = match worker.on_store(args, &index_location, scope, |store| {
        kafka::run(&brokers, &config, preparer, store, stop, metrics)
    }) {
        Ok(result) => result,
        Err(exit) => return exit,
    };
    worker.finish(args, result, |e| match e {
        // Nothing is lost: what was not committed is read again.
        kafka::KafkaError::Unavailable(_) => {
            Ending::Stopped("uncommitted records will be read again")
        }
        kafka::KafkaError::Settings(_) => Ending::Usage,
        _ => Ending::Failure,
    })
}

/// `dedup-stream index info|drop`.
pub fn index(args: &IndexAdminArgs) -> Exit {
    let result = match &args.action {
        IndexAction::Info(args) => match (&args.index, &args.state) {
            (Some(index), _) => admin::info(index, &args.index_name).map(|info| print!("{info}")),
            (None, Some(state)) => return state_info(state),
            (None, None) => return usage("index info needs --index URL or --state FILE"),
        },
        IndexAction::Drop(args) => {
            let target = &args.target;
            if !args.yes {
                match confirm_drop(target) {
                    Ok(true) => {}
                    Ok(false) => {
                        eprintln!("dedup-stream: nothing dropped");
                        return Exit::Failure;
                    }
                    Err(e) => return usage(e),
                }
            }
            admin::drop(&target.index, &target.index_name).map(|keys| {
                println!(
                    "dropped index {:?} at {}: {keys} keys removed",
                    target.index_name, target.index
                )
            })
        }
        IndexAction::Forget(args) => return forget(args),
    };
    match result {
        Ok(()) => Exit::Success,
        Err(e @ (StoreError::Name(_) | StoreError::Location { .. })) => usage(e),
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            Exit::Failure
        }
    }
}

/// `index info --state FILE`: a state file's header and its journal,
/// read without loading the index (so without its engine options).
fn state_info(path: &std::path::Path) -> Exit {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return usage(format!("--state {}: no such state file", path.display()));
        }
        Err(e) => {
            eprintln!("dedup-stream: {}: {e}", path.display());
            return Exit::Failure;
        }
    };
    let summary = match snapshot::describe(&bytes) {
        Ok(summary) => summary,
        Err(kind) => {
            eprintln!("dedup-stream: state file {}: {kind}", path.display());
            return Exit::Failure;
        }
    };
    println!("state file: {}", path.display());
    println!(
        "format:     version {}, {} bytes",
        summary.version,
        bytes.len()
    );
    println!(
        "settings:   {} (give the same --shingle and --sample to load it)",
        summary.shingling
    );
    println!("messages:   {} indexed", summary.entries);
    match summary.newest {
        Some(ms) => println!("newest:     {ms} ms since the epoch (the --window clock)"),
        None => println!("newest:     no message time"),
    }
    let journal = dedup_stream::state::journal::path_for(path);
    match std::fs::metadata(&journal) {
        Ok(meta) => println!(
            "journal:    {}, {} bytes (replayed over the file at the next load)",
            journal.display(),
            meta.len()
        ),
        Err(_) => println!("journal:    none"),
    }
    Exit::Success
}

/// Asks on the terminal whether to drop `target`: whether the answer was
/// yes. Without a terminal on stdin and stderr there is no one to ask: an
/// error that says to pass --yes.
fn confirm_drop(target: &crate::cli::args::IndexTarget) -> Result<bool, String> {
    use std::io::{BufRead, IsTerminal, Write};
    if !(io::stdin().is_terminal() && io::stderr().is_terminal()) {
        return Err(format!(
            "index drop removes every key of index {:?} at {}: pass --yes to do it without \
             a terminal to ask on",
            target.index_name, target.index
        ));
    }
    eprint!(
        "Remove every key of index {:?} at {}? [y/N] ",
        target.index_name, target.index
    );
    let _ = io::stderr().flush();
    let mut answer = String::new();
    io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// `dedup-stream index forget`: reads ids, has the index forget them, and
/// with a state file saves it (its journal cut down, as at the end of a
/// run).
fn forget(args: &ForgetArgs) -> Exit {
    let (engine, fields) = match (args.engine_config(), args.message.fields()) {
        (Ok(engine), Ok(fields)) => (engine, fields),
        (Err(e), _) | (_, Err(e)) => return usage(e),
    };
    let state = args.state.state_args();
    if let Err(e) = refuse_memory_only(&args.index, &state) {
        return usage(e);
    }
    let decoder = dedup_stream::Decoder::new(fields.clone());
    let input: Box<dyn io::BufRead> = match args.file.as_deref() {
        None => Box::new(io::stdin().lock()),
        Some(path) if path.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(path) => match std::fs::File::open(path) {
            Ok(file) => Box::new(io::BufReader::new(file)),
            Err(e) => {
                eprintln!("dedup-stream: {}: {e}", path.display());
                return Exit::Failure;
            }
        },
    };
    let report = |invalid: dedup_stream::error::InvalidLine| {
        eprintln!("dedup-stream: skipped {invalid}");
    };
    let max_line = args.message.max_line_bytes();
    let done = match &args.index.index {
        IndexLocation::Memory => {
            let Some(path) = &state.state else {
                return usage(
                    "index forget needs the index: --state FILE, or --index redis://… for one in Redis",
                );
            };
            if let Err(e) = output::check(&[(output::OutputKind::State, path)], &[], false) {
                return usage(e);
            }
            // A missing file is a mistyped name, not an empty index: the
            // real one would keep the deleted tweets. (A journal alone is
            // an index: a run stopped before its first save.)
            if !path.exists() && !dedup_stream::state::journal::path_for(path).exists() {
                return usage(format!(
                    "--state {}: no such state file (nor its journal); name the file the \
                     filter or serve saves",
                    path.display()
                ));
            }
            let preparer = Preparer::new(&engine);
            let (mut deduper, mut journal) =
                match crate::cli::serve::load_with_journal(&state, engine, &preparer, &fields) {
                    Ok(loaded) => loaded,
                    Err(exit) => return exit,
                };
            let done =
                match dedup_stream::forget::forget(input, max_line, &decoder, &mut deduper, report)
                {
                    Ok(done) => done,
                    Err(e) => {
                        eprintln!("dedup-stream: {e}");
                        return Exit::Failure;
                    }
                };
            let bytes = snapshot::encode(&deduper);
            let id = dedup_stream::state::journal::SnapshotId::of(&bytes);
            if let Some(journal) = journal.as_mut() {
                journal.mark(id);
            }
            if let Err(e) = snapshot::write_atomic(path, &bytes) {
                eprintln!("dedup-stream: saving the state to {}: {e}", path.display());
                return Exit::Failure;
            }
            if let Some(journal) = journal.as_mut() {
                journal.saved(id);
            }
            done
        }
        location => {
            let metrics = Arc::new(Metrics::default());
            let stop = Arc::new(AtomicBool::new(false));
            let options = index_options(&args.index, &stop, &metrics);
            let mut store =
                match open_index(location, &args.index.in_redis.index_name, &engine, options) {
                    Ok(store) => store,
                    Err(exit) => return exit,
                };
            match dedup_stream::forget::forget(input, max_line, &decoder, &mut store, report) {
                Ok(done) => done,
                Err(e) => {
                    eprintln!("dedup-stream: {e}");
                    return Exit::Failure;
                }
            }
        }
    };
    println!("{done}");
    Exit::Success
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_never_empty() {
        assert!(!hostname().is_empty());
    }
}
