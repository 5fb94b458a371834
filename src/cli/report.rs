//! `dedup-stream report TAGGED…`: the inputs and the output file of
//! [`dedup_stream::report_html`], with a progress line on a terminal.

use std::io::{self, Write};

use dedup_stream::state::output::{self, OutputKind};

use crate::{Exit, usage};

/// `dedup-stream report`: the HTML page of a run's tagged output.
pub fn report(args: &crate::cli::args::ReportArgs) -> Exit {
    use dedup_stream::report_html::{ReportOptions, build};
    use dedup_stream::wire::input::Source;
    let sources: Vec<Source> = args.files.iter().map(|p| Source::from_arg(p)).collect();
    if let Err(e) = dedup_stream::wire::input::check_readable(&sources) {
        eprintln!("dedup-stream: report: {e}");
        return Exit::Usage;
    }
    if let Some(path) = &args.output
        && let Err(e) = output::check(&[(OutputKind::Report, path)], &sources, false)
    {
        return usage(e);
    }
    let mut options = ReportOptions {
        clusters: args.clusters,
        title: args
            .files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ..ReportOptions::default()
    };
    if let Some(threshold) = args.threshold {
        options.threshold = threshold;
    }
    let page = match build(&sources, &options) {
        Ok(page) => page,
        Err(e) => {
            eprintln!("dedup-stream: report: {e}");
            return Exit::Failure;
        }
    };
    let written = match &args.output {
        Some(path) => output::write_file(path, page.as_bytes()),
        None => {
            let mut out = io::stdout().lock();
            out.write_all(page.as_bytes()).and_then(|()| out.flush())
        }
    };
    match written {
        Ok(()) => Exit::Success,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Exit::Success,
        Err(e) => {
            eprintln!("dedup-stream: report: writing the page: {e}");
            Exit::Failure
        }
    }
}
