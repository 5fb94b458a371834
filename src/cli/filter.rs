//! The filter (`dedup-stream [FILE...]`, no subcommand): inputs, outputs
//! and the index store wired to [`dedup_stream::pipeline`], the end-of-run
//! summary and notes, `--stats` and `--state`.

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::cli::args::FilterArgs;
use dedup_stream::engine::{IndexStore, Preparer};
use dedup_stream::metrics::Metrics;
use dedup_stream::pipeline::report::{DEFAULT_WARNING_LIMIT, Report};
use dedup_stream::redis_index::IndexLocation;
use dedup_stream::state::journal::{Journal, SnapshotId};
use dedup_stream::state::output::{self, AtomicFile, OutputKind};
use dedup_stream::state::snapshot::{self, Saveable};
use dedup_stream::wire::input::{self, Inputs, Source};
use dedup_stream::{Error, pipeline};

use crate::{Exit, SIGINT, runtime, stop_on_signal, usage};

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
        let status =
            (!args.quiet && io::stderr().is_terminal() && !output_on_terminal).then(|| {
                crate::cli::status::StatusLine::start(
                    Arc::clone(&report),
                    args.message.capacity.get(),
                )
            });
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
        // What the run passed over, said once at the end.
        let notes = [
            (
                report.unreadable_times(),
                [
                    "message with an unreadable created_at",
                    "messages with an unreadable created_at",
                ],
                "took the arrival time of the line (--window)",
            ),
            (
                report.missing_times(),
                [
                    "message without a created_at",
                    "messages without a created_at",
                ],
                "took the arrival time of the line (--window)",
            ),
            (
                report.hidden(),
                ["more invalid line", "more invalid lines"],
                "not shown (-v shows every one)",
            ),
        ];
        for (count, [one, many], what) in notes {
            if count > 0 {
                let counted = dedup_stream::pipeline::stats::counted(count, one, many);
                eprintln!("dedup-stream: {counted} {what}");
            }
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

/// The filter: every input line decided and written, in order; the
/// summary and notes at the end.
pub fn filter(args: &FilterArgs) -> Exit {
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
    if let Err(e) = crate::cli::scale::refuse_memory_only(&args.index, &args.state) {
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
            match crate::cli::serve::load_with_journal(&args.state, config, &run.preparer, &fields)
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
            let mut options = crate::cli::scale::index_options(&args.index, &run.stop, &metrics);
            options.threads = Some(run.pipeline_config.threads);
            let store = match crate::cli::scale::open_index(
                location,
                &args.index.in_redis.index_name,
                &config,
                options,
            ) {
                Ok(store) => store,
                Err(exit) => return exit,
            };
            let exit = match runtime() {
                Ok(runtime) => run.filter(store, runtime, None),
                Err(exit) => exit,
            };
            crate::cli::scale::report_store(&metrics);
            exit
        }
    }
}

/// Writes `--stats`: the summary as one JSON object and a newline.
fn write_stats<S: IndexStore>(path: &Path, finished: &pipeline::Finished<S>) -> io::Result<()> {
    let json = finished.summary.to_json(&finished.store.stats());
    output::write_file(path, format!("{json}\n").as_bytes())
}
