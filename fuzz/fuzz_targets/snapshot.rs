//! The state file reader on any bytes: an error, never a panic or an
//! allocation larger than the file calls for. Each input is tried as it
//! is and with its checksum made right, so that mutations reach the
//! entries behind the checksum.
#![no_main]

use std::sync::Mutex;

use dedup_stream::state::snapshot::decode_into;
use dedup_stream::{Deduper, EngineConfig};
use libfuzzer_sys::fuzz_target;

static DEDUPER: Mutex<Option<Deduper>> = Mutex::new(None);

fn small() -> Deduper {
    Deduper::new(EngineConfig {
        capacity: std::num::NonZeroUsize::new(64).unwrap(),
        ..EngineConfig::default()
    })
    .unwrap()
}

fuzz_target!(|data: &[u8]| {
    let mut guard = DEDUPER.lock().unwrap();
    let deduper = guard.get_or_insert_with(small);
    let mut fixed = data.to_vec();
    if fixed.len() >= 4 {
        let body = fixed.len() - 4;
        let crc = crc32fast::hash(&fixed[..body]);
        fixed[body..].copy_from_slice(&crc.to_le_bytes());
    }
    for bytes in [data, &fixed[..]] {
        match decode_into(bytes, deduper) {
            Ok(n) => {
                assert!(n <= bytes.len() / 22);
                // Start the next input from an empty index.
                *deduper = small();
            }
            Err(_) => assert!(
                deduper.index().is_empty(),
                "a refused file changed the index"
            ),
        }
    }
});
