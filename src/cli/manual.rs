//! The manual pages (`dedup-stream man [SUBCOMMAND]`): clap_mangen's
//! sections from the command line's definition, and the sections it cannot
//! know (exit status, environment, examples) written here, per page.

use std::io::Write;

/// What a page adds to clap_mangen's sections.
struct Extra {
    exit_status: &'static [(&'static str, &'static str)],
    environment: &'static str,
    examples: &'static [(&'static str, &'static str)],
}

const FILTER: Extra = Extra {
    exit_status: &[
        (
            "0",
            "Done: the input ended, the output pipe closed, or SIGTERM stopped the run (what was read is decided and written).",
        ),
        (
            "1",
            "A fatal error: an input or output that cannot be read or written, a state file or journal that cannot be loaded, Redis refusing.",
        ),
        (
            "2",
            "A usage error: an unknown option, a value out of range (also from a DEDUP_STREAM_ variable), an output path that is an input or a file of another kind.",
        ),
        (
            "65",
            "No line was usable (the reason and a hint follow on stderr), or an invalid line with --on-invalid fail.",
        ),
        (
            "130",
            "Stopped by SIGINT (Ctrl-C): what was read is decided and written.",
        ),
    ],
    environment: "Every option can also be set by DEDUP_STREAM_ and its long name in capitals, dashes as underscores (--threshold: DEDUP_STREAM_THRESHOLD); the command line wins. RUST_LOG overrides the logging level (-v).",
    examples: &[
        (
            "Tag a file, and keep only what is new:",
            "dedup-stream tweets.jsonl > tagged.jsonl\ndedup-stream --emit new tweets.jsonl.gz > deduplicated.jsonl",
        ),
        (
            "Keep the index from one run to the next:",
            "dedup-stream --state index.state today.jsonl > tagged.jsonl",
        ),
        (
            "Share one index with other workers, through Redis:",
            "dedup-stream --index redis://127.0.0.1:6379 part1.jsonl > out1.jsonl",
        ),
    ],
};

const SERVE: Extra = Extra {
    exit_status: &[
        (
            "0",
            "Stopped by SIGTERM or SIGINT after answering what it received and saving its state.",
        ),
        (
            "1",
            "A fatal error: a listener that cannot be bound, a state file or journal that cannot be loaded, Redis refusing.",
        ),
        (
            "2",
            "A usage error: an unknown option or a value out of range (also from a DEDUP_STREAM_ variable).",
        ),
    ],
    environment: "Every option can also be set by DEDUP_STREAM_ and its long name in capitals, dashes as underscores (--listen: DEDUP_STREAM_LISTEN); the command line wins. Values holding a password (--index) are never shown by --help.",
    examples: &[
        (
            "A sidecar on loopback, its index kept across restarts:",
            "dedup-stream serve --listen 127.0.0.1:7878 --state index.state --admin 127.0.0.1:9100",
        ),
        (
            "Ask it from a shell:",
            "echo '{\"id\":1,\"text\":\"hello world\"}' | socat - TCP:127.0.0.1:7878",
        ),
    ],
};

const CONSUME: Extra = Extra {
    exit_status: &[
        (
            "0",
            "Stopped by SIGTERM or SIGINT after acknowledging the batch in hand (unacknowledged entries stay pending).",
        ),
        (
            "1",
            "A fatal error: an output or dead-letter key that is not a stream (nothing acknowledged), authentication refused, Redis refusing.",
        ),
        (
            "2",
            "A usage error: an unknown option or a value out of range (also from a DEDUP_STREAM_ variable).",
        ),
    ],
    environment: "Every option can also be set by DEDUP_STREAM_ and its long name in capitals, dashes as underscores (--stream: DEDUP_STREAM_STREAM); the command line wins. Values holding a password (--redis, --index) are never shown by --help nor logged.",
    examples: &[(
        "Two workers of one consumer group, exactly once into tweets:tagged:",
        "dedup-stream consume --redis redis://127.0.0.1:6379 --stream tweets --group dedup --output tweets:tagged &\ndedup-stream consume --redis redis://127.0.0.1:6379 --stream tweets --group dedup --output tweets:tagged &",
    )],
};

const COMPARE: Extra = Extra {
    exit_status: &[
        ("0", "The two texts are near-duplicates at the threshold."),
        ("1", "They are not."),
        ("2", "A usage error, or a file (@PATH) that cannot be read."),
    ],
    environment: "RUST_LOG overrides the logging level.",
    examples: &[(
        "Why were these two tagged (or not)?",
        "dedup-stream compare 'RT @news: Flooding closes the coastal highway' 'Flooding closes the coastal highway tonight'",
    )],
};

const REPORT: Extra = Extra {
    exit_status: &[
        ("0", "The page was written (or its reader closed the pipe)."),
        (
            "1",
            "An input could not be read, or the page could not be written.",
        ),
        (
            "2",
            "A usage error: an input that is not there, or an output that is another kind of file.",
        ),
    ],
    environment: "RUST_LOG overrides the logging level.",
    examples: &[(
        "Tag a file with the rules that decided, then look at what was removed:",
        "dedup-stream --explain tweets.jsonl.zst -o tagged.jsonl\ndedup-stream report tagged.jsonl -o report.html",
    )],
};

const INDEX: Extra = Extra {
    exit_status: &[
        ("0", "Done."),
        ("1", "Redis refused, or there is no such index (info)."),
        ("2", "A usage error: a bad location or index name."),
    ],
    environment: "RUST_LOG overrides the logging level.",
    examples: &[(
        "What an index in Redis holds, then remove it:",
        "dedup-stream index info --index redis://127.0.0.1:6379\ndedup-stream index drop --index redis://127.0.0.1:6379",
    )],
};

const TUNE: Extra = Extra {
    exit_status: &[
        (
            "0",
            "Done: the report is on stdout (and the tables in --csv, --json).",
        ),
        ("1", "A file that cannot be read or written."),
        (
            "2",
            "A usage error: an unknown option, a value out of range, a table path that is an input or a file of another kind.",
        ),
        (
            "65",
            "The sample cannot be scored: a truth file without a cluster column or with fewer rows than the data has lines, a line without its label, no usable line.",
        ),
    ],
    environment: "RUST_LOG overrides the logging level.",
    examples: &[
        (
            "Which threshold suits a labelled sample (a truth TSV of one row per line):",
            "dedup-stream tune sample.jsonl --truth sample.truth.tsv --csv grid.csv",
        ),
        (
            "Labels in a field of each line, a narrower grid:",
            "dedup-stream tune sample.jsonl --label-field cluster --thresholds 0.6,0.7,0.8,0.9 --measures containment",
        ),
    ],
};

const OTHER: Extra = Extra {
    exit_status: &[("0", "Done."), ("2", "A usage error.")],
    environment: "None.",
    examples: &[],
};

/// The subcommands that have a page of their own (`index-forget`: the
/// page of `index forget`).
pub const PAGES: &[&str] = &[
    "compare",
    "report",
    "serve",
    "consume",
    "index",
    "index-info",
    "index-drop",
    "index-forget",
    "tune",
    "completions",
    "man",
];

/// Writes every page into `dir` (`dedup-stream.1`,
/// `dedup-stream-serve.1`, …): the names of the files written.
pub fn render_all(dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut written = Vec::new();
    for page in std::iter::once(None).chain(PAGES.iter().map(|p| Some(*p))) {
        let name = match page {
            None => "dedup-stream.1".to_string(),
            Some(page) => format!("dedup-stream-{page}.1"),
        };
        let mut out = Vec::new();
        render(page, &mut out)?;
        let path = dir.join(name);
        std::fs::write(&path, out)?;
        written.push(path);
    }
    Ok(written)
}

/// A synopsis with each option's value name (`[--state FILE]`), which
/// clap_mangen's leaves out.
fn synopsis(command: &clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    let name = command
        .get_bin_name()
        .unwrap_or_else(|| command.get_name())
        .to_string();
    let mut parts = vec![format!("\\fB{}\\fR", escape(&name))];
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let values = arg
            .get_value_names()
            .map(|names| {
                names
                    .iter()
                    .map(|n| format!(" \\fI{}\\fR", escape(n)))
                    .collect::<String>()
            })
            .unwrap_or_default();
        let takes_value = arg.get_action().takes_values();
        let part = match (arg.get_short(), arg.get_long()) {
            (_, None) => format!("\\fI{}\\fR", escape(&values_or_id(arg))),
            (Some(short), Some(long)) => {
                format!("\\fB\\-{short}\\fR|\\fB\\-\\-{}\\fR", escape(long))
            }
            (None, Some(long)) => format!("\\fB\\-\\-{}\\fR", escape(long)),
        };
        let part = if takes_value && arg.get_long().is_some() {
            format!("{part}{values}")
        } else {
            part
        };
        let repeated = matches!(
            arg.get_action(),
            clap::ArgAction::Append | clap::ArgAction::Count
        );
        let dots = if repeated { "..." } else { "" };
        parts.push(if arg.is_required_set() {
            format!("{part}{dots}")
        } else {
            format!("[{part}]{dots}")
        });
    }
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        parts.push("<\\fIsubcommand\\fR>".to_string());
    }
    writeln!(out, ".SH SYNOPSIS\n{}", parts.join(" "))
}

/// A positional argument's value name (`FILE`), else its id.
fn values_or_id(arg: &clap::Arg) -> String {
    arg.get_value_names()
        .and_then(|names| names.first())
        .map_or_else(|| arg.get_id().to_string(), ToString::to_string)
}

/// Writes the page of `page` (a subcommand), or the main one.
pub fn render(page: Option<&str>, out: &mut dyn Write) -> std::io::Result<()> {
    let mut root = crate::cli::args::command().disable_help_subcommand(true);
    root.build();
    let (command, extra) = match page {
        None => (root, &FILTER),
        Some(name) => {
            // `index-forget`: the page of `index forget`.
            let mut found = Some(&root);
            for part in name.split('-') {
                found = found.and_then(|c| c.find_subcommand(part));
            }
            let Some(command) = found.cloned() else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no page {name:?}"),
                ));
            };
            let extra = match name {
                "serve" => &SERVE,
                "consume" => &CONSUME,
                "compare" => &COMPARE,
                "report" => &REPORT,
                "index" | "index-info" | "index-drop" | "index-forget" => &INDEX,
                "tune" => &TUNE,
                _ => &OTHER,
            };
            (command, extra)
        }
    };
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    synopsis(&command, out)?;
    man.render_description_section(out)?;
    if command.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if command.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    writeln!(out, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in extra.exit_status {
        writeln!(out, ".TP\n\\fB{code}\\fR\n{}", escape(meaning))?;
    }
    writeln!(out, ".SH ENVIRONMENT\n{}", escape(extra.environment))?;
    if !extra.examples.is_empty() {
        writeln!(out, ".SH EXAMPLES")?;
        for (what, commands) in extra.examples {
            writeln!(out, ".PP\n{}\n.PP\n.nf\n.RS 4", escape(what))?;
            for line in commands.lines() {
                writeln!(out, "{}", escape(line))?;
            }
            writeln!(out, ".RE\n.fi")?;
        }
    }
    if page.is_none() {
        writeln!(
            out,
            ".SH \"SEE ALSO\"\n{}",
            PAGES
                .iter()
                .map(|p| format!("\\fBdedup-stream-{p}\\fR(1)"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        // Only the main command has a version (clap_mangen unwraps it).
        man.render_version_section(out)?;
    }
    Ok(())
}

/// Text made safe for roff: backslashes doubled, a leading dot or quote
/// kept from being read as a request.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\\\").replace('-', "\\-");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_has_exit_status_environment_and_examples() {
        for page in std::iter::once(None).chain(PAGES.iter().map(|p| Some(*p))) {
            let mut out = Vec::new();
            render(page, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains(".SH \"EXIT STATUS\""), "{page:?}");
            assert!(text.contains(".SH ENVIRONMENT"), "{page:?}");
            if matches!(
                page,
                None | Some("serve" | "consume" | "compare" | "report" | "index" | "tune")
            ) {
                assert!(text.contains(".SH EXAMPLES"), "{page:?}");
            }
        }
        let mut serve = Vec::new();
        render(Some("serve"), &mut serve).unwrap();
        let serve = String::from_utf8(serve).unwrap();
        assert!(serve.contains("dedup\\-stream\\-serve") || serve.contains("dedup-stream-serve"));
        assert!(serve.contains("listen"));
        assert!(render(Some("nope"), &mut Vec::new()).is_err());
    }

    #[test]
    fn all_pages_are_written_with_value_names_in_their_synopses() {
        let dir = tempfile::tempdir().unwrap();
        let written = render_all(dir.path()).unwrap();
        assert_eq!(written.len(), PAGES.len() + 1);
        let forget =
            std::fs::read_to_string(dir.path().join("dedup-stream-index-forget.1")).unwrap();
        assert!(
            forget.contains("\\fBdedup\\-stream index forget\\fR"),
            "{forget}"
        );
        assert!(
            forget.contains("[\\fB\\-\\-state\\fR \\fIFILE\\fR]"),
            "{forget}"
        );
        let main = std::fs::read_to_string(dir.path().join("dedup-stream.1")).unwrap();
        assert!(
            main.contains("[\\fB\\-\\-threshold\\fR \\fIF\\fR]"),
            "{main}"
        );
        assert!(
            main.contains("dedup-stream-index-forget\\fR(1)"),
            "SEE ALSO: {main}"
        );
    }
}
