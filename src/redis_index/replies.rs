//! A connection to a single Redis whose replies are read by a parser of
//! our own, for the links that read large replies: a Redis Streams
//! worker's reads of a few hundred entries at a time.
//!
//! The `redis` crate's reply parser is general (it resumes a partial
//! reply, speaks RESP3) and costs about 7,300 instructions an entry of a
//! tweet, as much as deciding it: its combinators run for every byte of
//! each line, and its buffer is zeroed as it grows. Bulk strings and
//! arrays, nearly all of a read's reply, are read here by length from a
//! buffered socket; every other reply (simple strings, errors, integers)
//! is one line, handed to the crate's own parser, so errors carry the
//! codes and kinds the rest of the code matches on. Only plain
//! connections are made this way (TCP without TLS, or a Unix socket, in
//! RESP2); [`PlainConnection::open`] says `None` to the others, which the
//! crate connects.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use redis::{
    ConnectionAddr, ConnectionInfo, ConnectionLike, ErrorKind, ProtocolVersion, RedisError,
    RedisResult, Value,
};

/// Nesting of arrays refused past this depth, as by the crate's parser.
const MAX_DEPTH: usize = 100;
/// The socket's read buffer: a read of 256 tweets is about 1.3 MB.
const READ_BUFFER: usize = 64 * 1024;
/// Most room reserved ahead for a bulk string or an array from its
/// announced length: a length past it is read as it comes.
const MOST_RESERVED: usize = 1 << 20;
/// Longest line of a reply (a simple string, an error, a length).
const MAX_LINE: u64 = 64 * 1024;

/// The socket of a plain connection.
enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// A connection to a single Redis, TCP or a Unix socket, reading replies
/// with the parser of this module.
pub(crate) struct PlainConnection {
    reader: BufReader<Stream>,
    /// The reply line being read.
    line: Vec<u8>,
    db: i64,
    /// False once a read or write failed: the connection is not used
    /// again.
    open: bool,
}

impl PlainConnection {
    /// Whether this module speaks to `info`'s Redis: TCP without TLS or a
    /// Unix socket, in RESP2. The others are the crate's connection's.
    pub(crate) fn serves(info: &ConnectionInfo) -> bool {
        let plain = match info.addr() {
            ConnectionAddr::Tcp(..) => true,
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => true,
            _ => false,
        };
        plain && info.redis_settings().protocol() == ProtocolVersion::RESP2
    }

    /// Connects to `info`'s Redis (one [`PlainConnection::serves`]) within
    /// `connect_timeout`, then authenticates and selects its database;
    /// `timeout` bounds every read and write.
    pub(crate) fn open(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> RedisResult<PlainConnection> {
        let settings = info.redis_settings();
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => connect_tcp(host, *port, connect_timeout, timeout),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => UnixStream::connect(path).and_then(|s| {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                Ok(Stream::Unix(s))
            }),
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "not a plain connection (TLS): the redis crate's connection serves it",
            )),
        };
        stream.map_err(RedisError::from).and_then(|stream| {
            let mut connection = PlainConnection {
                reader: BufReader::with_capacity(READ_BUFFER, stream),
                line: Vec::new(),
                db: settings.db(),
                open: true,
            };
            if let Some(password) = settings.password() {
                let mut auth = redis::cmd("AUTH");
                if let Some(user) = settings.username() {
                    auth.arg(user);
                }
                auth.arg(password).query::<()>(&mut connection)?;
            }
            if settings.db() != 0 {
                redis::cmd("SELECT")
                    .arg(settings.db())
                    .query::<()>(&mut connection)?;
            }
            Ok(connection)
        })
    }

    /// Reads one reply.
    fn read_value(&mut self, depth: usize) -> RedisResult<Value> {
        // A length line is read where it lies in the buffer when it is
        // whole there, as nearly all are.
        let buffered = self.reader.buffer();
        let (kind, len) = match memchr::memchr(b'\n', buffered) {
            Some(end) if matches!(buffered[0], b'$' | b'*') => {
                let line = &buffered[..=end];
                let len = length(line)?;
                let kind = line[0];
                self.reader.consume(end + 1);
                (kind, len)
            }
            _ => {
                self.line.clear();
                (&mut self.reader)
                    .take(MAX_LINE)
                    .read_until(b'\n', &mut self.line)?;
                match self.line.first() {
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "Redis closed the connection",
                        )
                        .into());
                    }
                    // One line: the crate reads it as it would have.
                    Some(b'+' | b'-' | b':') => return redis::parse_redis_value(&self.line),
                    Some(&kind @ (b'$' | b'*')) => (kind, length(&self.line)?),
                    Some(_) => return Err(malformed("a reply of a type RESP2 does not have")),
                }
            }
        };
        match (kind, len) {
            (_, None) => Ok(Value::Nil),
            (b'$', Some(len)) => {
                let mut bytes = Vec::with_capacity((len + 2).min(MOST_RESERVED));
                let mut left = len + 2;
                while left > 0 {
                    // A signal (the stop request) cuts a read of a socket
                    // with a timeout short even under SA_RESTART: the
                    // reply, its entries now pending, must still be read.
                    let buffered = match self.reader.fill_buf() {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        read => read?,
                    };
                    if buffered.is_empty() {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "Redis closed the connection within a reply",
                        )
                        .into());
                    }
                    let taken = buffered.len().min(left);
                    bytes.extend_from_slice(&buffered[..taken]);
                    self.reader.consume(taken);
                    left -= taken;
                }
                if !bytes.ends_with(b"\r\n") {
                    return Err(malformed("a bulk string does not end in CRLF"));
                }
                bytes.truncate(len);
                Ok(Value::BulkString(bytes))
            }
            (_, Some(len)) => {
                if depth >= MAX_DEPTH {
                    return Err(malformed("arrays nested too deep"));
                }
                let mut items = Vec::with_capacity(len.min(MOST_RESERVED / 16));
                for _ in 0..len {
                    items.push(self.read_value(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
        }
    }

    /// Sends `packed` and reads `count` replies; a failure closes the
    /// connection for good.
    fn exchange(&mut self, packed: &[u8], count: usize) -> RedisResult<Vec<Value>> {
        if !self.open {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "the connection broke").into());
        }
        let result = self
            .reader
            .get_mut()
            .write_all(packed)
            .map_err(RedisError::from)
            .and_then(|()| (0..count).map(|_| self.read_value(0)).collect());
        if result.is_err() {
            self.open = false;
        }
        result
    }
}

impl ConnectionLike for PlainConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.exchange(cmd, 1)?
            .pop()
            .ok_or_else(|| malformed("no reply read"))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut replies = self.exchange(cmd, offset + count)?;
        // The replies skipped (a transaction's `MULTI` and `QUEUED`) fail
        // the whole if one is an error, as with the crate's connection.
        for reply in replies.drain(..offset) {
            reply.extract_error()?;
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

fn connect_tcp(
    host: &str,
    port: u16,
    connect_timeout: Duration,
    timeout: Duration,
) -> io::Result<Stream> {
    let mut last_error = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, connect_timeout) {
            Ok(tcp) => {
                tcp.set_nodelay(true)?;
                tcp.set_read_timeout(Some(timeout))?;
                tcp.set_write_timeout(Some(timeout))?;
                return Ok(Stream::Tcp(tcp));
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host}:{port} resolves to no address"),
        )
    }))
}

/// The length a `$` or `*` line (with its CRLF) announces; `None` for
/// `-1` (nil).
fn length(line: &[u8]) -> RedisResult<Option<usize>> {
    let Some(digits) = line.get(1..).and_then(|rest| rest.strip_suffix(b"\r\n")) else {
        return Err(malformed("a reply line does not end in CRLF"));
    };
    if digits == b"-1" {
        return Ok(None);
    }
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(malformed("a length that is not a number"));
    }
    Ok(Some(
        digits
            .iter()
            .fold(0, |n, &digit| n * 10 + usize::from(digit - b'0')),
    ))
}

fn malformed(what: &'static str) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "a malformed reply from Redis",
        what.to_string(),
    ))
}

#[cfg(all(test, unix))]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A connection reading `bytes` as if Redis had sent them.
    fn replies(bytes: &[u8]) -> Vec<RedisResult<Value>> {
        let (mut ours, theirs) = UnixStream::pair().unwrap();
        ours.write_all(bytes).unwrap();
        drop(ours);
        let mut connection = PlainConnection {
            reader: BufReader::with_capacity(16, Stream::Unix(theirs)),
            line: Vec::new(),
            db: 0,
            open: true,
        };
        let mut out = Vec::new();
        loop {
            let reply = connection.read_value(0);
            let eof = reply.as_ref().is_err_and(|e| e.is_io_error());
            out.push(reply);
            if eof {
                return out;
            }
        }
    }

    #[test]
    fn replies_read_as_the_crates_parser_reads_them() {
        let stream = b"*1\r\n*2\r\n$4\r\nq:in\r\n*3\r\n\
            *2\r\n$3\r\n1-1\r\n*2\r\n$4\r\njson\r\n$24\r\n{\"id\":1,\"text\":\"a\\r\\nb\"}\r\n\
            *2\r\n$3\r\n1-2\r\n*-1\r\n\
            *2\r\n$3\r\n1-3\r\n*4\r\n$1\r\na\r\n$0\r\n\r\n$4\r\njson\r\n$-1\r\n";
        let lines: &[&[u8]] = &[
            stream,
            b"+OK\r\n",
            b"+PONG\r\n",
            b":-42\r\n",
            b"*-1\r\n",
            b"$-1\r\n",
            b"*0\r\n",
            b"-NOGROUP No such key 'q:in' or consumer group 'g'\r\n",
            b"-ERR unknown command\r\n",
            b"*2\r\n+OK\r\n-ERR inside\r\n",
            b"$12\r\nbinary\x00\xff\r\n\r\n\r\n",
        ];
        for line in lines {
            let ours = replies(line);
            assert_eq!(ours.len(), 2, "one reply, then the end: {ours:?}");
            let theirs = redis::parse_redis_value(line);
            match (&ours[0], &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(line)),
                _ => panic!("{ours:?} against {theirs:?}"),
            }
        }
        // Several in a row, across the small buffer's refills.
        let all: Vec<u8> = lines.concat();
        let ours = replies(&all);
        assert_eq!(ours.len(), lines.len() + 1);
        for (reply, line) in ours.iter().zip(lines) {
            assert_eq!(
                reply.as_ref().unwrap(),
                &redis::parse_redis_value(line).unwrap()
            );
        }
    }

    /// A reply in RESP2, built from its parts.
    fn reply() -> impl Strategy<Value = Vec<u8>> {
        let leaf = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|bytes| {
                let mut out = format!("${}\r\n", bytes.len()).into_bytes();
                out.extend_from_slice(&bytes);
                out.extend_from_slice(b"\r\n");
                out
            }),
            Just(b"$-1\r\n".to_vec()),
            Just(b"*-1\r\n".to_vec()),
            any::<i64>().prop_map(|n| format!(":{n}\r\n").into_bytes()),
            "[a-zA-Z0-9 ]{0,20}".prop_map(|s| format!("+{s}\r\n").into_bytes()),
            "[A-Z]{1,8} [a-z ]{0,20}".prop_map(|s| format!("-{s}\r\n").into_bytes()),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            proptest::collection::vec(inner, 0..8).prop_map(|items| {
                let mut out = format!("*{}\r\n", items.len()).into_bytes();
                for item in items {
                    out.extend_from_slice(&item);
                }
                out
            })
        })
    }

    proptest! {
        #[test]
        fn any_reply_reads_as_the_crates_parser_reads_it(
            replies_sent in proptest::collection::vec(reply(), 1..6)
        ) {
            let ours = replies(&replies_sent.concat());
            prop_assert_eq!(ours.len(), replies_sent.len() + 1);
            for (reply, sent) in ours.iter().zip(&replies_sent) {
                prop_assert_eq!(
                    reply.as_ref().unwrap(),
                    &redis::parse_redis_value(sent).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_malformed_or_cut_reply_is_an_error_never_a_value() {
        let cases: &[&[u8]] = &[
            b"$5\r\nabc",
            b"$3\r\nabcde\r\n",
            b"$x\r\nabc\r\n",
            b"*2\r\n$1\r\na\r\n",
            b"%1\r\n+a\r\n+b\r\n",
            b"*1\n",
        ];
        for case in cases {
            let ours = replies(case);
            assert!(
                ours[0].is_err(),
                "{}: {ours:?}",
                String::from_utf8_lossy(case)
            );
        }
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        let ours = replies(&deep);
        assert!(
            ours[0]
                .as_ref()
                .is_err_and(|e| e.to_string().contains("nested too deep")),
            "{ours:?}"
        );
    }
}
