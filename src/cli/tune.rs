//! `dedup-stream tune`: the command line's side of [`dedup_stream::tune`]
//! (reading the files, printing the report, writing the tables). The
//! grid's runs and their scoring live in the library.

use std::io::{self, BufReader, Write};
use std::path::Path;

use dedup_stream::state::output::{self, OutputKind};
use dedup_stream::tune::{self, Grid, Labels, Sample};
use dedup_stream::wire::input::Source;

use crate::Exit;
use crate::cli::args::TuneArgs;

/// Runs the grid and reports; exit 1 when a file cannot be read or
/// written, 2 on bad usage.
pub fn tune(args: &TuneArgs) -> Exit {
    let base = match args.message.engine_config(&args.engine) {
        Ok(config) => config,
        Err(e) => return crate::usage(e),
    };
    let fields = match args.message.fields() {
        Ok(fields) => fields,
        Err(e) => return crate::usage(e),
    };
    let outputs: Vec<(OutputKind, &Path)> = [
        (OutputKind::TuneCsv, args.csv.as_deref()),
        (OutputKind::TuneJson, args.json.as_deref()),
    ]
    .into_iter()
    .filter_map(|(kind, path)| Some((kind, path?)))
    .collect();
    let mut inputs = vec![Source::File(args.data.clone())];
    inputs.extend(args.truth.clone().map(Source::File));
    if let Err(e) = output::check(&outputs, &inputs, false) {
        return crate::usage(e);
    }
    let mut grid = Grid::around(&base);
    if !args.thresholds.is_empty() {
        grid.thresholds = args.thresholds.clone();
    }
    if !args.measures.is_empty() {
        grid.measures = args.measures.clone();
    }
    if !args.shingles.is_empty() {
        grid.shingles = args.shingles.clone();
    }
    let grid = grid.with(&base);
    let labels = match (&args.truth, &args.label_field) {
        (Some(path), _) => {
            let read = std::fs::File::open(path)
                .map_err(|source| tune::TuneError::Io {
                    what: path.display().to_string(),
                    source,
                })
                .and_then(|file| tune::read_truth(BufReader::new(file)));
            match read {
                Ok(rows) => Labels::Truth(rows),
                Err(e) => return fail(e),
            }
        }
        (None, Some(field)) => Labels::Field(field.clone()),
        (None, None) => return crate::usage("give --truth FILE or --label-field PATH"),
    };
    let data = match std::fs::read(&args.data) {
        Ok(data) => data,
        Err(e) => {
            eprintln!(
                "dedup-stream: tune: cannot read {}: {e}",
                args.data.display()
            );
            return Exit::Failure;
        }
    };
    let sample = match Sample::load(&data, fields, &labels) {
        Ok(sample) => sample,
        Err(e) => return fail(e),
    };
    if sample.is_empty() {
        eprintln!(
            "dedup-stream: tune: no usable line in {}",
            args.data.display()
        );
        return Exit::DataError;
    }
    let threads = args
        .threads
        .and_then(|t| t.0)
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, |n| n.get());
    let (points, took) = tune::timed(|| tune::run(&sample, &base, &grid, threads));
    let points = match points {
        Ok(points) => points,
        Err(e) => return fail(e),
    };
    if let Some(path) = &args.csv {
        let mut csv = String::new();
        tune::write_csv(&points, &mut csv);
        if let Err(e) = output::write_file(path, csv.as_bytes()) {
            eprintln!("dedup-stream: --csv {}: {e}", path.display());
            return Exit::Failure;
        }
    }
    if let Some(path) = &args.json {
        let json = format!("{}\n", tune::to_json(&points, &base));
        if let Err(e) = output::write_file(path, json.as_bytes()) {
            eprintln!("dedup-stream: --json {}: {e}", path.display());
            return Exit::Failure;
        }
    }
    let report = tune::report(&points, &base, &sample, took);
    let mut out = io::stdout().lock();
    match out.write_all(report.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Exit::Success,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("dedup-stream: writing output: {e}");
            Exit::Failure
        }
    }
}

/// Reports a sample that cannot be tuned on: exit 65 (bad data), as the
/// filter's invalid input.
fn fail(e: tune::TuneError) -> Exit {
    eprintln!("dedup-stream: tune: {e}");
    match e {
        tune::TuneError::Io { .. } => Exit::Failure,
        tune::TuneError::Config(_) => Exit::Usage,
        _ => Exit::DataError,
    }
}
