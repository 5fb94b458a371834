//! `dedup-stream compare A B`: two texts (or lines) read from the command
//! line or files, compared by [`dedup_stream::compare`], and the answer
//! printed for people or as JSON.

use std::io::{self, Write};

use crate::cli::args::CompareArgs;
use dedup_stream::engine::verdict::RECENT_MARGIN;
use dedup_stream::engine::{Explained, Preparer};
use dedup_stream::wire::input::{self};
use dedup_stream::{Decoder, FieldSpec};

use crate::{Exit, usage};

/// `dedup-stream compare`: the verdict for two texts, and why.
pub fn compare(args: &CompareArgs) -> Exit {
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
        explained.push(dedup_stream::compare::explain_input(
            &preparer, &decoder, &text,
        ));
    }
    let b = explained.pop().expect("two texts");
    let a = explained.pop().expect("two texts");
    // B is taken as the later message, as a stream would see the two.
    let comparison = dedup_stream::compare::compare(&config, a, b);
    let (a, b) = (&comparison.a, &comparison.b);
    let similarity = comparison.similarity;
    let duplicate = comparison.duplicate;
    let verdict = if comparison.duplicate && !comparison.lone_recent {
        "duplicate".to_string()
    } else if comparison.lone_recent {
        format!(
            "duplicate (a lone recent match: at least the threshold minus {RECENT_MARGIN}, \
             see --recent)"
        )
    } else if comparison.slot_differs {
        "not a duplicate (each has a number the other lacks: slot_differs)".to_string()
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
        let (counts, rule) = (&comparison.counts, comparison.rule);
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
