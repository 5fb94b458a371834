//! Looking after an index in Redis from the command line: what it holds
//! and how much memory it takes (`dedup-stream index info`), and removing
//! it, every key of it (`dedup-stream index drop`).

use redis::{ConnectionLike, RedisResult, Value};

use super::connection::{IndexLocation, Link};
use super::{check_name, key_prefix};
use crate::error::StoreError;

/// What `index info` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexInfo {
    /// The index name.
    pub name: String,
    /// Its settings, as stored with it.
    pub settings: String,
    /// Entries appended to its log since it was made.
    pub entries: u64,
    /// Entries the log holds now (the rest are trimmed behind snapshots).
    pub held_entries: u64,
    /// Messages checked since it was made.
    pub checked: u64,
    /// The newest snapshot, if one was stored.
    pub snapshot: Option<SnapshotInfo>,
    /// Its keys in Redis.
    pub keys: u64,
    /// Bytes of Redis memory its keys take (`MEMORY USAGE`, summed).
    pub memory_bytes: u64,
}

/// What the newest snapshot of an index held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The log entry it was taken at.
    pub entry: u64,
    /// Messages indexed then.
    pub len: u64,
    /// Messages evicted until then.
    pub evictions: u64,
    /// Its size.
    pub bytes: u64,
}

impl std::fmt::Display for IndexInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "index:     {}", self.name)?;
        writeln!(f, "settings:  {}", self.settings)?;
        writeln!(
            f,
            "log:       {} entries appended, {} held",
            self.entries, self.held_entries
        )?;
        let len = match &self.snapshot {
            Some(s) => {
                writeln!(
                    f,
                    "snapshot:  at entry {}, {} bytes ({} entries since)",
                    s.entry,
                    s.bytes,
                    self.entries.saturating_sub(s.entry)
                )?;
                writeln!(
                    f,
                    "messages:  {} checked; {} indexed, {} evicted at the snapshot",
                    self.checked, s.len, s.evictions
                )?;
                s.len
            }
            None => {
                writeln!(f, "snapshot:  none yet (the whole log is held)")?;
                writeln!(f, "messages:  {} checked", self.checked)?;
                0
            }
        };
        let per = self
            .memory_bytes
            .checked_div(len)
            .map(|per| format!(", {per} bytes per indexed message"))
            .unwrap_or_default();
        writeln!(
            f,
            "memory:    {} bytes in {} keys{per}",
            self.memory_bytes, self.keys
        )
    }
}

/// A glob pattern matching exactly the keys that start with `prefix`.
fn prefix_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 4);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// A connection to the one server that holds the index's keys: the
/// location's server, or in a cluster the node serving the index's slot.
fn owner(location: &IndexLocation, name: &str) -> Result<Box<dyn ConnectionLike>, StoreError> {
    let failed = |e: redis::RedisError| super::connection::refused(&e);
    let connect = |url: &str| -> Result<redis::Connection, StoreError> {
        redis::Client::open(url)
            .and_then(|c| super::connection::connect_single(&c, std::time::Duration::from_secs(5)))
            .map_err(failed)
    };
    match location {
        IndexLocation::Memory => Err(StoreError::Location {
            given: "memory".into(),
            reason: "an index in memory lives and dies with its process".into(),
        }),
        IndexLocation::Redis(url) => Ok(Box::new(connect(url)?)),
        IndexLocation::Cluster(urls) => {
            let mut any = connect(&urls[0])?;
            let meta = format!("{}cfg", key_prefix(name));
            let slot: i64 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&meta)
                .query(&mut any)
                .map_err(failed)?;
            let slots: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut any)
                .map_err(failed)?;
            let (host, port) = slot_owner(&slots, slot).ok_or_else(|| {
                StoreError::Refused(format!("no node of the cluster serves slot {slot}"))
            })?;
            // Keep the scheme and credentials of the URL given.
            let base = &urls[0];
            let (scheme, rest) = base.split_once("://").unwrap_or(("redis", base));
            let auth = rest
                .rsplit_once('@')
                .map(|(a, _)| format!("{a}@"))
                .unwrap_or_default();
            Ok(Box::new(connect(&format!(
                "{scheme}://{auth}{host}:{port}"
            ))?))
        }
    }
}

/// The host and port of the master serving `slot`, from `CLUSTER SLOTS`.
fn slot_owner(slots: &Value, slot: i64) -> Option<(String, i64)> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(parts) = range else {
            return None;
        };
        match parts.as_slice() {
            [Value::Int(start), Value::Int(end), Value::Array(node), ..]
                if (*start..=*end).contains(&slot) =>
            {
                let host = match node.first()? {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => return None,
                };
                match node.get(1)? {
                    Value::Int(port) => Some((host, *port)),
                    _ => None,
                }
            }
            _ => None,
        }
    })
}

/// Every key of the index, a page at a time.
fn for_each_key_page(
    con: &mut dyn ConnectionLike,
    name: &str,
    mut page: impl FnMut(&mut dyn ConnectionLike, Vec<Vec<u8>>) -> RedisResult<()>,
) -> RedisResult<()> {
    let pattern = prefix_pattern(&key_prefix(name));
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        if !keys.is_empty() {
            page(con, keys)?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// Reads what the index holds and how much memory its keys take.
pub fn info(location: &IndexLocation, name: &str) -> Result<IndexInfo, StoreError> {
    check_name(name)?;
    let failed = |e: redis::RedisError| super::connection::refused(&e);
    let mut con = owner(location, name)?;
    let prefix = key_prefix(name);
    let settings: Option<String> = redis::cmd("HGET")
        .arg(format!("{prefix}cfg"))
        .arg("settings")
        .query(con.as_mut())
        .map_err(failed)?;
    let Some(settings) = settings else {
        return Err(StoreError::Refused(format!(
            "there is no index {name:?} at {location}"
        )));
    };
    let cfg: Vec<Option<u64>> = redis::cmd("HMGET")
        .arg(format!("{prefix}cfg"))
        .arg(&[
            "n",
            "snap_n",
            "snap_len",
            "snap_evictions",
            "snap_bytes",
            "checked",
        ])
        .query(con.as_mut())
        .map_err(failed)?;
    let field = |i: usize| cfg.get(i).copied().flatten();
    let held_entries: u64 = redis::cmd("XLEN")
        .arg(format!("{prefix}log"))
        .query(con.as_mut())
        .map_err(failed)?;
    let (mut keys, mut memory_bytes) = (0u64, 0u64);
    for_each_key_page(con.as_mut(), name, |con, page| {
        let mut pipe = redis::pipe();
        for key in &page {
            pipe.cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0);
        }
        let sizes: Vec<Option<u64>> = pipe.query(con)?;
        keys += page.len() as u64;
        memory_bytes += sizes.into_iter().flatten().sum::<u64>();
        Ok(())
    })
    .map_err(failed)?;
    Ok(IndexInfo {
        name: name.to_string(),
        settings,
        entries: field(0).unwrap_or(0),
        held_entries,
        checked: field(5).unwrap_or(0),
        snapshot: field(1).map(|entry| SnapshotInfo {
            entry,
            len: field(2).unwrap_or(0),
            evictions: field(3).unwrap_or(0),
            bytes: field(4).unwrap_or(0),
        }),
        keys,
        memory_bytes,
    })
}

/// Removes every key of the index; returns how many there were. An index
/// that does not exist is not an error (nothing is removed).
pub fn drop(location: &IndexLocation, name: &str) -> Result<u64, StoreError> {
    check_name(name)?;
    // Make sure the location is reachable and well formed before anything.
    Link::new(location, super::DEFAULT_TIMEOUT)?;
    let mut con = owner(location, name)?;
    let mut removed = 0u64;
    for_each_key_page(con.as_mut(), name, |con, page| {
        removed += page.len() as u64;
        redis::cmd("UNLINK").arg(page).query::<()>(con)
    })
    .map_err(|e| super::connection::refused(&e))?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_matches_the_prefix_literally() {
        assert_eq!(prefix_pattern("{a*b}:"), "{a\\*b}:*");
        assert_eq!(prefix_pattern("{x[1]?}:"), "{x\\[1\\]\\?}:*");
    }

    #[test]
    fn the_slot_owner_is_found() {
        let node = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let slots = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("127.0.0.1", 7001),
            ]),
        ]);
        assert_eq!(slot_owner(&slots, 42), Some(("127.0.0.1".into(), 7000)));
        assert_eq!(slot_owner(&slots, 9000), Some(("127.0.0.1".into(), 7001)));
        assert_eq!(slot_owner(&Value::Nil, 1), None);
    }
}
