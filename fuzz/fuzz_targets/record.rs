//! The record decoder and the tag splice, on any bytes: the decoder's fast
//! path reads the line as serde_json alone does (the same record or the
//! same refusal), and then either a typed error, or an output line that
//! parses as the input object plus `dedup`, every input byte kept.
#![no_main]

use dedup_stream::wire::record::{Decoder, FieldSpec, write_tagged};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::LazyLock;

static DECODERS: LazyLock<[Decoder; 2]> = LazyLock::new(|| {
    [
        Decoder::new(FieldSpec::default()),
        Decoder::new(
            FieldSpec::new(Some("guid"), vec!["title".into(), "data.text".into()]).unwrap(),
        ),
    ]
});

const TAG: &[u8] = br#"{"status":"new"}"#;

fuzz_target!(|line: &[u8]| {
    for decoder in DECODERS.iter() {
        // The fast path reads every line as serde_json alone does.
        if let Err(e) = dedup_stream::fuzzing::decoder_agrees(decoder, line) {
            panic!("{e}");
        }
        let Ok(record) = decoder.decode(line) else {
            continue;
        };
        let mut out = Vec::new();
        write_tagged(&mut out, line, record.splice, |o| o.extend_from_slice(TAG));
        // Every byte of the line is there, in order, around the tag.
        assert_eq!(line[record.splice.at], b'}');
        assert!(out.starts_with(&line[..record.splice.at]));
        assert!(out.ends_with(&[&line[record.splice.at..], b"\n"].concat()));
        // Where serde_json reads the input (it refuses lone surrogates,
        // which the decoder accepts), it reads the output as the same
        // object plus the tag.
        let Ok(Value::Object(mut input)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let Ok(Value::Object(mut output)) = serde_json::from_slice::<Value>(&out) else {
            panic!(
                "tagged output is not an object: {:?}",
                String::from_utf8_lossy(&out)
            );
        };
        assert_eq!(
            output.remove("dedup"),
            Some(serde_json::from_slice(TAG).unwrap())
        );
        input.remove("dedup");
        assert_eq!(input, output);
        // The id is the JSON text the input had, not a float's.
        let _ = record.id.to_json();
    }
});
