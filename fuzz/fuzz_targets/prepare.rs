//! Normalise, tokenise and shingle any UTF-8 text (and URL pairs): no
//! panic, and a set within the cap, sorted and deduplicated, empty exactly
//! when nothing is left of the text once normalised.
#![no_main]

use std::borrow::Cow;
use std::sync::LazyLock;

use dedup_stream::engine::shingle::MAX_SHINGLES;
use dedup_stream::engine::{Preparer, Scratch};
use dedup_stream::{EngineConfig, Shingling};
use libfuzzer_sys::fuzz_target;

static PREPARERS: LazyLock<Vec<Preparer>> = LazyLock::new(|| {
    [
        Shingling::Words(2),
        Shingling::Words(5),
        Shingling::Chars(3),
        Shingling::Spots(2),
    ]
    .into_iter()
    .map(|shingling| {
        Preparer::new(&EngineConfig {
            shingling,
            ..EngineConfig::default()
        })
    })
    .collect()
});

fuzz_target!(|data: &[u8]| {
    let Ok(data) = std::str::from_utf8(data) else {
        return;
    };
    // The first line is the text; the others are short and expanded URLs.
    let mut parts = data.split('\n');
    let text = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    let urls: Vec<(Cow<'_, str>, Cow<'_, str>)> = rest
        .chunks_exact(2)
        .map(|pair| (Cow::Borrowed(pair[0]), Cow::Borrowed(pair[1])))
        .collect();
    let mut scratch = Scratch::default();
    for preparer in PREPARERS.iter() {
        let sketch = preparer.sketch(text, &urls, &mut scratch);
        // Empty exactly when nothing is left once normalised.
        let blank = preparer
            .normalise(text, &urls, &mut Scratch::default())
            .trim()
            .is_empty();
        assert_eq!(sketch.shingles.is_empty(), blank, "{text:?}");
        assert!(sketch.shingles.len() <= MAX_SHINGLES);
        assert!(sketch.shingles.windows(2).all(|w| w[0] < w[1]));
        let again = preparer.sketch(text, &urls, &mut Scratch::default());
        assert_eq!(sketch.shingles, again.shingles, "deterministic");
    }
});
