//! The `dedup-stream` binary: command line in, library calls, exit status
//! out. All the logic lives in the library.

mod cli;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use cli::args::{Command, CompletionsArgs, ShellArg, StateArgs};
use dedup_stream::Deduper;
use dedup_stream::state::snapshot::{self, Loaded};

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
    let cli = cli::args::parse();
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
        Some(Command::Compare(args)) => cli::compare::compare(&args),
        Some(Command::Report(args)) => cli::report::report(&args),
        Some(Command::Serve(args)) => cli::serve::serve(&args),
        Some(Command::Consume(args)) => cli::scale::consume(&args),
        Some(Command::Index(args)) => cli::scale::index(&args),
        Some(Command::Tune(args)) => cli::tune::tune(&args),
        Some(Command::Completions(args)) => completions(&args),
        Some(Command::Man(args)) => match &args.all {
            Some(dir) => man_all(dir),
            None => man(args.page.as_deref()),
        },
        None => cli::filter::filter(&cli.filter),
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
        .with_writer(cli::status::Stderr::new)
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal() && !no_color)
        .without_time()
        .with_target(false)
        .init();
}

/// Listens for SIGINT and SIGTERM from this call on, and returns what
/// completes on the first of them, recording which. On Unix the listening
/// starts here, not when the future is first polled: until then either
/// signal would still kill the process outright, and a server already
/// answering requests would cut them off mid-response (elsewhere, Ctrl-C
/// is listened for from the first poll). Must be called within a tokio
/// runtime.
fn shutdown_signal(which: Arc<AtomicU8>) -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listening = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            let (Ok(mut int), Ok(mut term)) = listening else {
                tracing::warn!("cannot listen for signals; only the end of input stops the run");
                return std::future::pending().await;
            };
            let code = tokio::select! {
                _ = int.recv() => SIGINT,
                _ = term.recv() => SIGTERM,
            };
            which.store(code, Ordering::Relaxed);
        }
    }
    #[cfg(not(unix))]
    {
        let ctrl_c = tokio::signal::ctrl_c();
        async move {
            if ctrl_c.await.is_ok() {
                which.store(SIGINT, Ordering::Relaxed);
            } else {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Listens for SIGINT and SIGTERM from this call on (see
/// [`shutdown_signal`]), and returns what completes on the first of them
/// and tells a store waiting for Redis to give up.
fn stop_on_signal(which: Arc<AtomicU8>, stop: Arc<AtomicBool>) -> impl Future<Output = ()> {
    let signalled = shutdown_signal(which);
    async move {
        signalled.await;
        stop.store(true, Ordering::Relaxed);
    }
}

/// Reports a bad option value in clap's style: exit status 2.
fn usage(error: impl std::fmt::Display) -> Exit {
    cli::args::usage_error(error);
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
    clap_complete::generate(shell, &mut cli::args::command(), "dedup-stream", &mut out);
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
    match cli::manual::render(page, &mut out) {
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
    match cli::manual::render_all(dir) {
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

const SIGINT: u8 = 2;
const SIGTERM: u8 = 15;
