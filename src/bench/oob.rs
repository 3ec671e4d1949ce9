//! The out-of-band exchange over TCP: one text line per message.
//!
//! The client opens with `HELLO`, carrying the whole test description (the
//! server takes its parameters from it); the server answers with its
//! device address, R_Key, buffer address and one `<qpn> <psn>` line per QP
//! (or `ERR <why>`); the client sends the same (`PEER`); the server brings
//! its QPs up and answers `READY`. Then, per message size, `SIZE <bytes>`
//! / `GO`, the measurement, `DONE` / `OK`; at the end `BYE`.

use super::{Op, Params, Test};
use crate::oob::OobStream;
use std::io::{ErrorKind, Read, Write};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The protocol tag in `HELLO`.
const VERSION: &str = "uroce-bench/1";
/// The longest line accepted (a QP line is ~20 bytes; 16384 QPs fit).
const MAX_LINE: usize = 1 << 20;

/// A line-oriented TCP connection with deadlines (kernel TCP, or the
/// device's own on a link).
pub(crate) struct Channel {
    stream: OobStream,
    pending: Vec<u8>,
    /// How long a peer may stay silent.
    pub timeout: Duration,
}

impl Channel {
    /// Wraps a connected stream.
    pub fn new(mut stream: OobStream, timeout: Duration) -> Channel {
        stream.set_timeout(Some(timeout));
        Channel { stream, pending: Vec::new(), timeout }
    }

    /// Sends `text` (one or more lines; a final newline is added).
    pub fn send(&mut self, text: &str) -> Result<(), String> {
        let mut bytes = Vec::with_capacity(text.len() + 1);
        bytes.extend_from_slice(text.as_bytes());
        bytes.push(b'\n');
        self.stream.write_all(&bytes).map_err(|e| format!("sending to the peer: {e}"))
    }

    /// The next line, waiting at most `wait`; `None` when nothing came.
    pub fn try_recv(&mut self, wait: Duration) -> Result<Option<String>, String> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..pos]).trim_end().to_string();
                return Ok(Some(text));
            }
            if self.pending.len() > MAX_LINE {
                return Err("the peer sent an overlong line".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream.set_read_timeout(Some(left.max(Duration::from_millis(1))));
            let mut buf = [0u8; 16384];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err("the peer closed the connection".into()),
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("receiving from the peer: {e}")),
            }
        }
    }

    /// The next line, within the channel's timeout.
    pub fn recv(&mut self) -> Result<String, String> {
        match self.try_recv(self.timeout)? {
            Some(line) => Ok(line),
            None => {
                Err(format!("the peer said nothing for {} s (gone?)", self.timeout.as_secs_f64()))
            }
        }
    }

    /// The next line, which must be `word` (an `ERR` line is the peer's
    /// error).
    pub fn expect(&mut self, word: &str) -> Result<(), String> {
        let line = self.recv()?;
        check_word(&line, word)
    }
}

/// Checks that `line` is `word`; turns `ERR ...` into the peer's error.
pub(crate) fn check_word(line: &str, word: &str) -> Result<(), String> {
    if line == word {
        Ok(())
    } else if let Some(why) = line.strip_prefix("ERR ") {
        Err(format!("the peer failed: {why}"))
    } else {
        Err(format!("expected `{word}` from the peer, got `{}`", clip(line)))
    }
}

fn clip(line: &str) -> String {
    line.chars().take(80).collect()
}

/// One side's connection data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// The device address (its GID at index 1).
    pub ip: IpAddr,
    /// The R_Key of its buffer.
    pub rkey: u32,
    /// The buffer's address.
    pub vaddr: u64,
    /// Per QP: QPN and first PSN.
    pub qps: Vec<(u32, u32)>,
}

impl Endpoint {
    /// The message: `<tag> <ip> <rkey> <vaddr> <count>` and one line per QP.
    pub fn encode(&self, tag: &str) -> String {
        let mut text =
            format!("{tag} {} {:x} {:x} {}", self.ip, self.rkey, self.vaddr, self.qps.len());
        for (qpn, psn) in &self.qps {
            text.push_str(&format!("\n{qpn:x} {psn:x}"));
        }
        text
    }

    /// Reads the message `tag` with `expected_qps` QP lines.
    pub fn receive(ch: &mut Channel, tag: &str, expected_qps: usize) -> Result<Endpoint, String> {
        let line = ch.recv()?;
        if let Some(why) = line.strip_prefix("ERR ") {
            return Err(format!("the peer failed: {why}"));
        }
        let bad = || format!("malformed `{tag}` from the peer: `{}`", clip(&line));
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [word, ip, rkey, vaddr, count] = fields[..] else { return Err(bad()) };
        if word != tag {
            return Err(bad());
        }
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let rkey = u32::from_str_radix(rkey, 16).map_err(|_| bad())?;
        let vaddr = u64::from_str_radix(vaddr, 16).map_err(|_| bad())?;
        let count: usize = count.parse().map_err(|_| bad())?;
        if count != expected_qps {
            return Err(format!("the peer has {count} QPs, expected {expected_qps}"));
        }
        let mut qps = Vec::with_capacity(count);
        for _ in 0..count {
            let line = ch.recv()?;
            let mut it = line.split_whitespace().map(|f| u32::from_str_radix(f, 16));
            match (it.next(), it.next(), it.next()) {
                (Some(Ok(qpn)), Some(Ok(psn)), None) if qpn <= 0xff_ffff && psn <= 0xff_ffff => {
                    qps.push((qpn, psn))
                }
                _ => return Err(format!("malformed QP line from the peer: `{}`", clip(&line))),
            }
        }
        Ok(Endpoint { ip, rkey, vaddr, qps })
    }
}

impl Params {
    /// The `HELLO` line.
    pub fn hello(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(u32::to_string).collect();
        format!(
            "HELLO {VERSION} op={} test={} qps={} iters={} tx={} rx={} cqmod={} mtu={} \
             inline={} sizes={}",
            self.op.name(),
            self.test.name(),
            self.qps,
            self.iters,
            self.tx_depth,
            self.rx_depth,
            self.cq_mod,
            self.mtu,
            self.inline,
            sizes.join(",")
        )
    }

    /// Parses a `HELLO` line (from an untrusted peer: every value is
    /// checked).
    pub fn parse_hello(line: &str) -> Result<Params, String> {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("HELLO") {
            return Err(format!("expected HELLO, got `{}`", clip(line)));
        }
        if fields.next() != Some(VERSION) {
            return Err(format!("not a {VERSION} peer: `{}`", clip(line)));
        }
        let mut p = Params {
            op: Op::Write,
            test: Test::Bw,
            qps: 0,
            iters: 0,
            sizes: Vec::new(),
            tx_depth: 0,
            rx_depth: 0,
            cq_mod: 0,
            mtu: 0,
            inline: 0,
        };
        let mut seen = 0u32;
        for field in fields {
            let bad = || format!("bad HELLO field `{}`", clip(field));
            let (key, value) = field.split_once('=').ok_or_else(bad)?;
            let number = || value.parse::<u32>().map_err(|_| bad());
            match key {
                "op" => p.op = Op::from_name(value).ok_or_else(bad)?,
                "test" => p.test = Test::from_name(value).ok_or_else(bad)?,
                "qps" => p.qps = number()?,
                "iters" => p.iters = number()?,
                "tx" => p.tx_depth = number()?,
                "rx" => p.rx_depth = number()?,
                "cqmod" => p.cq_mod = number()?,
                "mtu" => p.mtu = number()?,
                "inline" => p.inline = number()?,
                "sizes" => {
                    p.sizes = value
                        .split(',')
                        .map(|s| s.parse::<u32>().map_err(|_| bad()))
                        .collect::<Result<_, _>>()?
                }
                _ => return Err(bad()),
            }
            seen += 1;
        }
        if seen != 10 {
            return Err(format!("incomplete HELLO: `{}`", clip(line)));
        }
        p.check()?;
        Ok(p)
    }
}
