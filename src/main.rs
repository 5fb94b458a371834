//! The `dedup-stream` binary: command line in, library calls, exit status
//! out. All the logic lives in the library.

mod cli;
mod manual;
mod scale;
mod status;
mod tune_cmd;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use cli::{Command, CompareArgs, CompletionsArgs, FilterArgs, ServeArgs, ShellArg, StateArgs};
use dedup_stream::engine::verdict::{LoneMatch, RECENT_MARGIN};
use dedup_stream::engine::{Explained, IndexStore, Preparer, Rule};
use dedup_stream::input::{self, Inputs, Source};
use dedup_stream::journal::{self, Journal, JournalError, SnapshotId};
use dedup_stream::output::{self, AtomicFile, OutputKind};
use dedup_stream::redis_index::IndexLocation;
use dedup_stream::report::{DEFAULT_WARNING_LIMIT, Report};
use dedup_stream::server::metrics::Metrics;
use dedup_stream::server::{self, Listeners};
use dedup_stream::snapshot::{self, Loaded, Saveable};
use dedup_stream::{Decoder, Deduper, EngineConfig, Error, FieldSpec, pipeline};

/// How the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Done: end of input, a closed output pipe, or SIGTERM.
    Success = 0,
    /// A fatal error (I/O, internal).
    Failure = 1,
    /// Bad usage (clap exits with 2 itself; this covers our own checks).
    Usage = 2,
    /// An invalid input line with `--on-invalid fail` (EX_DATAERR).
    DataError = 65,
    /// Stopped by SIGINT (128 + 2, as shells expect).
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

fn main() -> ExitCode {
    let cli = cli::parse();
    let level = match &cli.command {
        Some(Command::Serve(args)) if args.quiet => LevelFilter::WARN,
        Some(Command::Serve(args)) => match args.verbose {
            0 => LevelFilter::INFO,
            _ => LevelFilter::DEBUG,
        },
        Some(Command::Consume(args)) if args.quiet => LevelFilter::WARN,
        Some(Command::Consume(args)) => match args.verbose {
            0 => LevelFilter::INFO,
            _ => LevelFilter::DEBUG,
        },
        Some(_) => LevelFilter::WARN,
        None if cli.filter.quiet => LevelFilter::WARN,
        None => match cli.filter.verbose {
            0 => LevelFilter::WARN,
            1 => LevelFilter::INFO,
            _ => LevelFilter::DEBUG,
        },
    };
    init_logging(level);
    let exit = match cli.command {
        Some(Command::Compare(args)) => compare(&args),
        Some(Command::Serve(args)) => serve(&args),
        Some(Command::Consume(args)) => scale::consume(&args),
        Some(Command::Index(args)) => scale::index(&args),
        Some(Command::Tune(args)) => tune_cmd::tune(&args),
        Some(Command::Completions(args)) => completions(&args),
        Some(Command::Man(args)) => match &args.all {
            Some(dir) => man_all(dir),
            None => man(args.page.as_deref()),
        },
        None => filter(&cli.filter),
    };
    ExitCode::from(exit)
}

/// Logs go to stderr at `level`, or as `RUST_LOG` says when it is set;
/// in colour only on a terminal and when `NO_COLOR` is not set.
fn init_logging(level: LevelFilter) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("dedup-stream: ignoring RUST_LOG={spec:?}: {e}");
            EnvFilter::new(level.to_string())
        }),
        // The NATS client's own debugging prints server URLs whole, password
        // and all: it says nothing below a warning unless RUST_LOG asks.
        _ => EnvFilter::new(format!("{level},async_nats=warn")),
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(status::Stderr::new)
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal() && !no_color)
        .without_time()
        .with_target(false)
        .init();
}

fn filter(args: &FilterArgs) -> Exit {
    // Said even with --quiet: a variable meant for a sidecar (a state file,
    // a Redis) changes what a plain run reads and writes.
    for taken in &args.from_env {
        eprintln!("dedup-stream: {taken} (from the environment)");
    }
    let mut pipeline_config = match args.pipeline_config() {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    // Everything that can be checked is checked before any input is read: a
    // typo in a path must not cost the run.
    let sources: Vec<Source> = args.files.iter().map(|p| Source::from_arg(p)).collect();
    if let Err(e) = input::check_readable(&sources) {
        return usage(format!("cannot read the input {e}"));
    }
    // Never an input, never a file of another kind (a slip such as
    // `--stats tweets.jsonl` must not replace the tweets).
    let outputs: Vec<(OutputKind, &Path)> = [
        (OutputKind::Tagged, args.output_file()),
        (OutputKind::State, args.state.state.as_deref()),
        (OutputKind::Stats, args.stats.as_deref()),
        (OutputKind::Rejects, args.rejects.as_deref()),
    ]
    .into_iter()
    .filter_map(|(kind, path)| Some((kind, path?)))
    .collect();
    if let Err(e) = output::check(&outputs, &sources, args.force) {
        return usage(e);
    }
    if args.output_file().is_none()
        && let Err(e) = output::check_stdout(&sources)
    {
        return usage(e);
    }
    if sources.is_empty() && io::stdin().is_terminal() && !args.quiet {
        eprintln!(
            "dedup-stream: reading JSON lines from stdin (end with Ctrl-D), or pass files: \
             dedup-stream FILE..."
        );
    }
    if let Err(e) = scale::refuse_memory_only(&args.index, &args.state) {
        return usage(e);
    }
    if args.explain && !matches!(args.index.index, IndexLocation::Memory) {
        return usage("--explain needs the index in memory (--index memory)");
    }
    let config = match args.engine_config() {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    let inputs = Inputs::new(sources);
    let limit = (args.verbose == 0).then_some(DEFAULT_WARNING_LIMIT);
    let mut report = Report::new(inputs.line_map(), limit);
    if config.window.is_some() {
        report = report.with_times();
    }
    // Skipped lines go to --rejects whole or not at all, as -o does.
    let rejects = match &args.rejects {
        None => None,
        Some(path) => match AtomicFile::create(path).and_then(|f| Ok((f.writer()?, f))) {
            Ok((writer, file)) => {
                report = report.with_rejects(Box::new(io::BufWriter::new(writer)));
                Some(file)
            }
            Err(e) => {
                eprintln!("dedup-stream: --rejects {}: {e}", path.display());
                return Exit::Failure;
            }
        },
    };
    let report = Arc::new(report);
    pipeline_config.report = Arc::clone(&report);
    let preparer = Preparer::new(&config);
    let stop = Arc::new(AtomicBool::new(false));
    let run = Run {
        args,
        pipeline_config,
        preparer,
        inputs,
        report,
        rejects,
        stop,
    };
    match &args.index.index {
        IndexLocation::Memory => {
            let fields = run.pipeline_config.fields.clone();
            match load_with_journal(&args.state, config, &run.preparer, &fields)
                .and_then(|(deduper, journal)| Ok((deduper, journal, runtime()?)))
            {
                Ok((mut deduper, journal, runtime)) => {
                    deduper.set_explain(args.explain);
                    deduper.set_threads(run.pipeline_config.threads);
                    run.filter(deduper, runtime, journal)
                }
                Err(exit) => exit,
            }
        }
        location => {
            let metrics = Arc::new(Metrics::default());
            let mut options = scale::index_options(&args.index, &run.stop, &metrics);
            options.threads = Some(run.pipeline_config.threads);
            let store = match scale::open_index(location, &args.index.index_name, &config, options)
            {
                Ok(store) => store,
                Err(exit) => return exit,
            };
            let exit = match runtime() {
                Ok(runtime) => run.filter(store, runtime, None),
                Err(exit) => exit,
            };
            scale::report_store(&metrics);
            exit
        }
    }
}

/// A filter run, ready but for its index store.
struct Run<'a> {
    args: &'a FilterArgs,
    pipeline_config: pipeline::PipelineConfig,
    preparer: Preparer,
    inputs: Inputs,
    report: Arc<Report>,
    /// The `--rejects` file, renamed into place at the end.
    rejects: Option<AtomicFile>,
    /// Tells a store waiting for Redis to give up (set on a signal).
    stop: Arc<AtomicBool>,
}

impl Run<'_> {
    /// Runs the filter over the inputs with the index in `store`, saves the
    /// state file and the stats if asked, and says how it went.
    fn filter<S>(self, store: S, runtime: tokio::runtime::Runtime, journal: Option<Journal>) -> Exit
    where
        S: IndexStore + Saveable + Send + 'static,
    {
        let Run {
            args,
            pipeline_config,
            preparer,
            inputs,
            report,
            rejects,
            stop,
        } = self;
        // Drawn on stderr's terminal, never where the tagged lines go: with
        // them on the same terminal it would run into them.
        let output_on_terminal = args.output_file().is_none() && io::stdout().is_terminal();
        let status = (!args.quiet && io::stderr().is_terminal() && !output_on_terminal)
            .then(|| status::StatusLine::start(Arc::clone(&report), args.message.capacity.get()));
        let signal = Arc::new(AtomicU8::new(0));
        let (target, writer): (Option<AtomicFile>, Box<dyn Write + Send>) = match args.output_file()
        {
            None => (None, Box::new(io::stdout())),
            Some(path) => match AtomicFile::create(path).and_then(|f| Ok((f.writer()?, f))) {
                Ok((writer, file)) => (Some(file), Box::new(writer)),
                Err(e) => {
                    eprintln!("dedup-stream: --output {}: {e}", path.display());
                    return Exit::Failure;
                }
            },
        };
        let result = runtime.block_on(async {
            let shutdown = stop_on_signal(Arc::clone(&signal), stop);
            pipeline::run_with_journal(
                pipeline_config,
                preparer,
                store,
                inputs,
                writer,
                shutdown,
                journal,
            )
            .await
        });
        runtime.shutdown_background();
        drop(status); // Clears the status line before anything else is said.
        // The lines skipped so far, whatever the run's end: a log of them.
        if let (Some(file), Some(path)) = (rejects, &args.rejects)
            && let Err(e) = report.finish_rejects().and_then(|()| file.commit())
        {
            eprintln!("dedup-stream: --rejects {}: {e}", path.display());
            return Exit::Failure;
        }
        let unreadable = report.unreadable_times();
        if unreadable > 0 {
            eprintln!(
                "dedup-stream: {} took the arrival time of the line (--window)",
                dedup_stream::stats::counted(
                    unreadable,
                    "message with an unreadable created_at",
                    "messages with an unreadable created_at"
                )
            );
        }
        let missing = report.missing_times();
        if missing > 0 {
            eprintln!(
                "dedup-stream: {} took the arrival time of the line (--window)",
                dedup_stream::stats::counted(
                    missing,
                    "message without a created_at",
                    "messages without a created_at"
                )
            );
        }
        let hidden = report.hidden();
        if hidden > 0 {
            eprintln!(
                "dedup-stream: {} not shown (-v shows every one)",
                dedup_stream::stats::counted(hidden, "more invalid line", "more invalid lines")
            );
        }
        match result {
            Ok(mut finished) => {
                // What was decided is written whole, also when a signal
                // stopped the run (as it would be on stdout).
                if let (Some(target), Some(path)) = (target, args.output_file())
                    && let Err(e) = target.commit()
                {
                    eprintln!("dedup-stream: --output {}: {e}", path.display());
                    return Exit::Failure;
                }
                if !args.quiet {
                    eprintln!("dedup-stream: {}", finished.summary);
                }
                // `--state F f | head -n 2`: the messages decided past what
                // the output took are kept all the same; say so, since a
                // later run meets them again.
                if let Some(written) = finished.output_closed_after
                    && (args.state.state.is_some() || args.index.index != IndexLocation::Memory)
                {
                    let decided = finished.summary.messages + finished.summary.deletions;
                    eprintln!(
                        "dedup-stream: the output closed after {written} lines; up to {} more \
                         decided messages are kept in the index without having been written: \
                         sent again, each gets its first verdict, marked \"repeat\":true \
                         (--repeats drop leaves them out)",
                        decided.saturating_sub(written)
                    );
                }
                if let Some(path) = &args.stats
                    && let Err(e) = write_stats(path, &finished)
                {
                    eprintln!("dedup-stream: --stats {}: {e}", path.display());
                    return Exit::Failure;
                }
                if let Some(path) = &args.state.state
                    && let Some(bytes) = finished.store.encode_snapshot()
                {
                    // The journal's marker goes first: a crash between the
                    // two leaves a journal that says what the file holds.
                    let id = SnapshotId::of(&bytes);
                    if let Some(journal) = finished.journal.as_mut() {
                        journal.mark(id);
                    }
                    if let Err(e) = snapshot::write_atomic(path, &bytes) {
                        eprintln!("dedup-stream: saving the state to {}: {e}", path.display());
                        return Exit::Failure;
                    }
                    if let Some(journal) = finished.journal.as_mut() {
                        journal.saved(id);
                    }
                    tracing::info!(
                        path = %path.display(),
                        entries = finished.store.stats().len,
                        "state saved"
                    );
                }
                // The process is about to exit and the system takes its
                // memory back at once: freeing a million index entries one
                // by one first would only delay the exit (by a tenth of a
                // second or more).
                let summary = finished.summary;
                std::mem::forget(finished.store);
                if signal.load(Ordering::Relaxed) == SIGINT {
                    Exit::Interrupted
                } else if let Some(hint) = report.no_usable_line(&summary) {
                    eprintln!("dedup-stream: no usable line: {hint}");
                    Exit::DataError
                } else {
                    Exit::Success
                }
            }
            Err(Error::Invalid(invalid)) => {
                eprintln!("dedup-stream: invalid input: {}", report.describe(&invalid));
                Exit::DataError
            }
            Err(e) => {
                eprintln!("dedup-stream: {e}");
                Exit::Failure
            }
        }
    }
}

/// Completes on SIGINT or SIGTERM, and tells a store waiting for Redis to
/// give up.
async fn stop_on_signal(which: Arc<AtomicU8>, stop: Arc<AtomicBool>) {
    shutdown_signal(which).await;
    stop.store(true, Ordering::Relaxed);
}

/// Writes `--stats`: the summary as one JSON object and a newline.
fn write_stats<S: IndexStore>(path: &Path, finished: &pipeline::Finished<S>) -> io::Result<()> {
    let json = finished.summary.to_json(&finished.store.stats());
    output::write_file(path, format!("{json}\n").as_bytes())
}

/// Reports a bad option value in clap's style: exit status 2.
fn usage(error: impl std::fmt::Display) -> Exit {
    cli::usage_error(error);
    Exit::Usage
}

/// `dedup-stream completions SHELL`.
fn completions(args: &CompletionsArgs) -> Exit {
    use clap_complete::Shell;
    let shell = match args.shell {
        ShellArg::Bash => Shell::Bash,
        ShellArg::Zsh => Shell::Zsh,
        ShellArg::Fish => Shell::Fish,
        ShellArg::Elvish => Shell::Elvish,
        ShellArg::Powershell => Shell::PowerShell,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cli::command(), "dedup-stream", &mut out);
    if shell == Shell::Bash {
        // clap_complete (4.6.11) spells a subcommand's state one way in the
        // loop that finds it (`dedup__stream__subcmd__serve`) and another
        // in the arms that complete it (`dedup__subcmd__stream__…`) when
        // the program's name has a hyphen, so no subcommand's options ever
        // complete (clap issues 6421, 6529). The arms are made to match.
        out = String::from_utf8_lossy(&out)
            .replace("dedup__subcmd__stream", "dedup__stream")
            .into_bytes();
    }
    write_stdout(&out)
}

/// `dedup-stream man [PAGE]`: a manual page, in roff.
fn man(page: Option<&str>) -> Exit {
    let mut out = Vec::new();
    match manual::render(page, &mut out) {
        Ok(()) => write_stdout(&out),
        Err(e) => {
            eprintln!("dedup-stream: cannot render the manual page: {e}");
            Exit::Failure
        }
    }
}

/// `dedup-stream man --all DIR`: every page into DIR, each file named.
fn man_all(dir: &Path) -> Exit {
    if !dir.is_dir() {
        return usage(format!("--all {}: not a directory", dir.display()));
    }
    match manual::render_all(dir) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            Exit::Success
        }
        Err(e) => {
            eprintln!(
                "dedup-stream: writing the manual pages into {}: {e}",
                dir.display()
            );
            Exit::Failure
        }
    }
}

/// Writes all of `bytes` to stdout; a closed pipe is a quiet success.
fn write_stdout(bytes: &[u8]) -> Exit {
    let mut out = io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Exit::Success,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("dedup-stream: writing output: {e}");
            Exit::Failure
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("dedup-stream: cannot start the runtime: {e}");
            Exit::Failure
        })
}

/// What `index forget` says of a state file it cannot load: it never
/// starts empty, which would forget every message the file holds.
const NOT_FRESH: &str = "index forget changes a state file only when it loads: give it the \
                         engine options (--shingle, --sample, ...) the file was made with";

/// Loads `--state` into a new engine (see [`load_state_checked`]).
fn load_state(args: &StateArgs, deduper: Deduper) -> Result<Deduper, Exit> {
    load_state_checked(args, deduper).map(|(deduper, _)| deduper)
}

/// Loads `--state` into a new engine, and says whether the index holds what
/// the file holds (it does not when --fresh-state set a bad file aside). A
/// missing file is the first run; a corrupt or incompatible one stops the
/// run (exit 1) and is left as it is, unless `--fresh-state` says to start
/// empty.
fn load_state_checked(args: &StateArgs, mut deduper: Deduper) -> Result<(Deduper, bool), Exit> {
    let Some(path) = &args.state else {
        return Ok((deduper, true));
    };
    match snapshot::load(path, &mut deduper) {
        Ok(Loaded::Missing) => {
            tracing::info!(path = %path.display(), "no state file yet: starting empty");
        }
        Ok(Loaded::Restored(entries)) => {
            tracing::info!(path = %path.display(), entries, "state loaded");
        }
        Err(e) if args.fresh_state => {
            // Loading leaves the engine untouched on error: it is empty.
            tracing::warn!("{e}; starting empty (--fresh-state): the file will be replaced");
            return Ok((deduper, false));
        }
        Err(e) => {
            eprintln!("dedup-stream: {e}");
            if args.offer_fresh_state {
                eprintln!(
                    "dedup-stream: the file was left as it is; pass --fresh-state to start \
                     with an empty index instead (it replaces the file at the next save)"
                );
            } else {
                eprintln!("dedup-stream: the file was left as it is; {NOT_FRESH}");
            }
            return Err(Exit::Failure);
        }
    }
    Ok((deduper, true))
}

/// `dedup-stream serve`: bind, serve until SIGTERM or SIGINT, drain, save.
fn serve(args: &ServeArgs) -> Exit {
    let config = match args.server_config() {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    if let Some(path) = &args.state.state
        && let Err(e) = output::check(&[(OutputKind::State, path)], &[], false)
    {
        return usage(e);
    }
    if let Err(e) = scale::refuse_memory_only(&args.index, &args.state) {
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
            let options = scale::index_options(&args.index, &stop, &metrics);
            let store = match scale::open_index(location, &args.index.index_name, &engine, options)
            {
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
fn load_with_journal(
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
/// [`dedup_stream::journal`]); a journal that cannot be read stops the
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
        let mut listeners = Listeners::default();
        for address in &args.listen {
            listeners.data.push(address.bind().await?);
        }
        if let Some(admin) = args.admin {
            let bound = tokio::net::TcpListener::bind(admin)
                .await
                .map_err(|source| Error::Listen {
                    address: admin.to_string(),
                    source,
                })?;
            listeners.admin = Some(bound);
        }
        let shutdown = stop_on_signal(Arc::clone(&signal), stop);
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

const SIGINT: u8 = 2;
const SIGTERM: u8 = 15;

/// Completes on SIGINT or SIGTERM, recording which.
async fn shutdown_signal(which: Arc<AtomicU8>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            tracing::warn!("cannot listen for signals; only the end of input stops the run");
            return std::future::pending().await;
        };
        let code = tokio::select! {
            _ = int.recv() => SIGINT,
            _ = term.recv() => SIGTERM,
        };
        which.store(code, Ordering::Relaxed);
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_ok() {
            which.store(SIGINT, Ordering::Relaxed);
        } else {
            std::future::pending::<()>().await;
        }
    }
}

fn compare(args: &CompareArgs) -> Exit {
    let config = match args.engine.engine_config(std::num::NonZeroUsize::MIN, 1) {
        Ok(config) => config,
        Err(e) => return usage(e),
    };
    let preparer = Preparer::new(&config);
    let decoder = Decoder::new(FieldSpec::default());
    let mut explained = Vec::new();
    for input in [&args.a, &args.b] {
        let text = match compare_input(input, args.file) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("dedup-stream: compare: {e}");
                return Exit::Usage;
            }
        };
        // A file (or argument) holding one JSON record is read as a record.
        let e = match decoder.decode(text.as_bytes()) {
            Ok(record) => preparer.explain(&record.text, &record.urls),
            Err(_) => preparer.explain(&text, &[]),
        };
        explained.push(e);
    }
    let (a, b) = (&explained[0], &explained[1]);
    let set = |e: &Explained| e.shingles.iter().map(|(f, _)| *f).collect::<Vec<u32>>();
    // B is taken as the later message, as a stream would see the two.
    // Two texts alone: every anchor they share is a copy's.
    let hints = dedup_stream::engine::PairHints {
        anchored: dedup_stream::engine::share_anchor(&b.anchors, b.truncated, &a.anchors, |_| true),
        earlier_truncated: a.truncated,
    };
    let similarity = dedup_stream::engine::similarity(config.measure, &set(b), &set(a), hints);
    // B right after A, alone: a lone recent match when it is one.
    let mut lone = LoneMatch::new(config.threshold, config.lone_reach(), 1);
    lone.offer((), similarity, 0, b.shingles.len(), a.shingles.len(), || ());
    // Two texts of one template that differ in a number are not copies,
    // however similar (see --explain's slot_differs).
    let slot_differs = dedup_stream::engine::verdict::slots_apply(&config)
        && dedup_stream::engine::verdict::slots_differ(&set(b), &set(a), b.truncated, a.truncated);
    let duplicate = !slot_differs && (similarity >= config.threshold || lone.result().is_some());
    let verdict = if slot_differs && (similarity >= config.threshold || lone.result().is_some()) {
        "not a duplicate (each has a number the other lacks: slot_differs)".to_string()
    } else if similarity >= config.threshold {
        "duplicate".to_string()
    } else if lone.result().is_some() {
        format!(
            "duplicate (a lone recent match: at least the threshold minus {RECENT_MARGIN}, \
             see --recent)"
        )
    } else {
        "not a duplicate".to_string()
    };
    let mut out = io::stdout().lock();
    let shown = |e: &Explained, other: &Explained| -> Vec<String> {
        e.shingles
            .iter()
            .filter(|(f, _)| !other.shingles.iter().any(|(g, _)| g == f))
            .map(|(_, s)| format!("{s:?}"))
            .collect()
    };
    let shared: Vec<String> = a
        .shingles
        .iter()
        .filter(|(f, _)| b.shingles.iter().any(|(g, _)| g == f))
        .map(|(_, s)| format!("{s:?}"))
        .collect();
    let report = format!(
        "similarity: {similarity:.4} ({measure}, {shingling}); threshold {threshold}: {verdict}\n\
         A normalised: {an:?} ({ac} shingles)\n\
         B normalised: {bn:?} ({bc} shingles)\n\
         shared ({sc}): {shared}\n\
         only in A ({oac}): {only_a}\n\
         only in B ({obc}): {only_b}\n",
        measure = config.measure,
        shingling = config.shingle_settings(),
        threshold = config.threshold,
        an = a
            .normalised
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        ac = a.shingles.len(),
        bn = b
            .normalised
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        bc = b.shingles.len(),
        sc = shared.len(),
        shared = shared.join(", "),
        oac = shown(a, b).len(),
        only_a = shown(a, b).join(", "),
        obc = shown(b, a).len(),
        only_b = shown(b, a).join(", "),
    );
    let report = if args.explain {
        let counts =
            dedup_stream::engine::explain::pair_counts(config.measure, &set(b), &set(a), hints);
        let rule = if set(a) == set(b) {
            Rule::Exact
        } else if slot_differs && (similarity >= config.threshold || lone.result().is_some()) {
            Rule::SlotDiffers
        } else if similarity >= config.threshold && counts.anchored {
            Rule::Anchor
        } else if similarity >= config.threshold {
            Rule::Threshold
        } else if duplicate {
            Rule::LoneRecent
        } else {
            Rule::BelowThreshold
        };
        format!(
            "{report}rule: {rule} ({measure}: {shared} of {total} shingles{against}; threshold {threshold})\n",
            rule = rule.name(),
            measure = counts.measure,
            shared = counts.shared,
            total = counts.total,
            against = match (counts.measure, counts.anchored) {
                (dedup_stream::Measure::Jaccard, _) => " in the union",
                (_, false) => " of the smaller set",
                (_, true) => " of the smaller set, which begins or ends as the other",
            },
            threshold = config.threshold,
        )
    } else {
        report
    };
    let report: String = report
        .lines()
        .map(|line| format!("{}\n", line.trim_end()))
        .collect();
    // As cmp and grep: 0 when the texts are near-duplicates, 1 when not,
    // 2 for trouble (a bad option, an unreadable file, a failed write), so
    // a script can branch on the answer.
    let answer = if duplicate {
        Exit::Success
    } else {
        Exit::Failure
    };
    match out.write_all(report.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => answer,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => answer,
        Err(e) => {
            eprintln!("dedup-stream: writing output: {e}");
            Exit::Usage
        }
    }
}

/// One of `compare`'s texts: the argument itself, or with `@PATH` (or
/// `--file`) the file's content. `@@` starts a text with a literal `@`. A
/// file holding several JSON lines is refused: it is the filter's input.
fn compare_input(arg: &str, from_file: bool) -> Result<String, String> {
    let path = if from_file {
        arg
    } else if let Some(literal) = arg.strip_prefix("@@") {
        return Ok(format!("@{literal}"));
    } else if let Some(path) = arg.strip_prefix('@') {
        path
    } else {
        return Ok(arg.to_string());
    };
    let bytes = std::fs::read(path).map_err(|e| {
        let mut message = format!("cannot read {path}: {e}");
        if !from_file {
            message.push_str(" (to compare a text starting with @, write @@)");
        }
        message
    })?;
    let bytes = bytes.strip_prefix(input::BOM).unwrap_or(&bytes);
    let text = String::from_utf8_lossy(bytes).trim().to_string();
    let json_lines = text
        .lines()
        .filter(|line| {
            let line = line.trim();
            line.starts_with('{') && serde_json::from_str::<serde_json::Value>(line).is_ok()
        })
        .count();
    if json_lines > 1 {
        return Err(format!(
            "{path} holds {json_lines} JSON lines, not one text: compare takes two texts \
             (or files of one text or one JSON record each); to tag a JSON-lines file, run \
             `dedup-stream {path}`"
        ));
    }
    Ok(text)
}
