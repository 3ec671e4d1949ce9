//! A small key-value store over one RC connection, written once against
//! `uroce-verbs` and the harness's [`Env`] (time) and [`Oob`] (a side
//! channel for the connection details): the tests run it in the
//! simulator under fault scenarios (`tests/harness.rs`), the `kv` binary
//! and `tests/real.rs` on the real UDP runtime.
//!
//! - The client SENDs small text requests (`put KEY VALUE`, `get KEY`,
//!   `ctr KEY`, `bye`); the server answers each by a SEND (`ok`,
//!   `val VALUE`, `none`, `ctr INDEX`, `err WHY`, `bye`).
//! - `incr KEY` is an RDMA FETCH_ADD on an 8-byte counter in the
//!   server's memory region: the server is not involved, except once per
//!   key to hand out the counter's slot (`ctr KEY`).
//! - Every client call has a deadline, measured with [`Env`]: past it the
//!   call fails with [`KvError::Timeout`]. A completion in error fails it
//!   with [`KvError::Completion`] (`RetryExcErr` when the server is
//!   unreachable). After either the connection is unusable: every later
//!   call returns that error again; connect anew.
//!
//! Lost, duplicated or reordered packets are the RC transport's business:
//! it retransmits, and its responder executes each request once (a
//! duplicate SEND is acknowledged without consuming a receive, a
//! duplicate FETCH_ADD is answered from the responder's saved result), so
//! a `put` or an `incr` is never applied twice.

use std::collections::BTreeMap;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;
use uroce_harness::{Env, Oob};
use uroce_verbs::connect::{self, Endpoint, Remote, Tuning};
use uroce_verbs::{
    Access, Context, RecvWr, RemoteTarget, Rkey, SendFlags, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
};

/// The largest request or answer, in bytes.
pub const MAX_MESSAGE: usize = 256;
/// How many counters a server holds.
pub const COUNTERS: u32 = 32;

// Each side's memory region: a receive buffer, a send buffer, then
// 8-byte words (the server's counters; the client's FETCH_ADD result).
const RECV_AT: u64 = 0;
const SEND_AT: u64 = MAX_MESSAGE as u64;
const WORDS_AT: u64 = 2 * MAX_MESSAGE as u64;
const MR_LEN: u64 = WORDS_AT + 8 * COUNTERS as u64;
const ACCESS: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// A work completion in error (`RetryExcErr`: the server is
    /// unreachable; `WrFlushErr`: the connection had already failed).
    Completion(WcStatus),
    /// The call's deadline passed.
    Timeout(Duration),
    /// A verbs call failed.
    Verbs(String),
    /// The side channel failed.
    Oob(io::ErrorKind),
    /// The peer said something this side does not understand.
    Protocol(String),
    /// The server refused the request (`err WHY`).
    Server(String),
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvError::Completion(status) => write!(f, "completion in error: {status:?}"),
            KvError::Timeout(d) => write!(f, "no answer within {d:?}"),
            KvError::Verbs(why) => write!(f, "verbs: {why}"),
            KvError::Oob(kind) => write!(f, "side channel: {kind}"),
            KvError::Protocol(why) => write!(f, "protocol: {why}"),
            KvError::Server(why) => write!(f, "server: {why}"),
        }
    }
}

impl std::error::Error for KvError {}

impl From<io::Error> for KvError {
    fn from(e: io::Error) -> KvError {
        KvError::Oob(e.kind())
    }
}

fn verbs<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, KvError> {
    r.map_err(|e| KvError::Verbs(format!("{what}: {e}")))
}

/// The connection's timers and the client's deadline.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The RC connection: ACK timeout, retries, MTU.
    pub tuning: Tuning,
    /// How long a client call (connect, put, get, incr, close) may take.
    pub deadline: Duration,
}

impl Options {
    /// The connection of [`Tuning::with_timeout`] (ACK timeout exponent
    /// `timeout`: 8 ≈ 1 ms, 14 ≈ 67 ms; 7 transport retries, infinite RNR
    /// retries, MTU 1024); `deadline` for every client call.
    pub fn new(timeout: u8, deadline: Duration) -> Options {
        Options { tuning: Tuning::with_timeout(timeout), deadline }
    }
}

/// One operation on the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Sets a value.
    Put(String, String),
    /// Reads a value (a counter reads as its decimal value).
    Get(String),
    /// Adds one to a counter (created at 0) and reads it.
    Incr(String),
}

/// An operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `put` done.
    Done,
    /// `get`'s value, if the key is set.
    Value(Option<String>),
    /// `incr`'s new value.
    Count(u64),
}

/// The store's contents: what the server returns when its client closes,
/// and the model the tests compare it with ([`Store::apply`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Store {
    /// Keys set by `put`.
    pub values: BTreeMap<String, String>,
    /// Keys counted by `incr`.
    pub counters: BTreeMap<String, u64>,
}

impl Store {
    /// Applies `op` as the server does: the reference model.
    pub fn apply(&mut self, op: &Op) -> Reply {
        match op {
            Op::Put(k, v) => {
                self.values.insert(k.clone(), v.clone());
                Reply::Done
            }
            Op::Get(k) => Reply::Value(self.get(k)),
            Op::Incr(k) => {
                let n = self.counters.entry(k.clone()).or_insert(0);
                *n += 1;
                Reply::Count(*n)
            }
        }
    }

    /// A value, else a counter's decimal value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.values.get(key).cloned().or_else(|| self.counters.get(key).map(u64::to_string))
    }
}

/// Runs `call`, failing with [`KvError::Timeout`] once `deadline` (on
/// `env`'s clock) has passed.
pub async fn within<T>(
    env: &impl Env,
    deadline: Duration,
    call: impl Future<Output = Result<T, KvError>>,
) -> Result<T, KvError> {
    let (mut call, mut timer) = (pin!(call), pin!(env.sleep(deadline)));
    poll_fn(|cx| {
        if let Poll::Ready(result) = call.as_mut().poll(cx) {
            return Poll::Ready(result);
        }
        timer.as_mut().poll(cx).map(|()| Err(KvError::Timeout(deadline)))
    })
    .await
}

/// One side's verbs objects and where the peer's memory region is.
struct Conn {
    side: Endpoint,
    /// The peer's region: its address and R_Key.
    peer_mr: RemoteTarget,
}

/// A hello: the [`Remote`] of the side's QP, then its region's address
/// and R_Key.
const HELLO_LEN: usize = Remote::LEN + 8 + 4;

impl Conn {
    /// Creates an RC QP and a region, swaps (GID, QPN, PSN, region) with
    /// the peer over `oob`, brings the QP to RTS with a receive posted.
    async fn open(ctx: &Context, oob: &impl Oob, psn: u32, t: &Tuning) -> Result<Conn, KvError> {
        let side = verbs("open", Endpoint::rc(ctx, 64, connect::cap(16, 1, 0), MR_LEN, ACCESS))?;
        let mut hello =
            verbs("query_gid", side.remote(ctx, t.sgid_index, psn))?.to_bytes().to_vec();
        hello.extend_from_slice(&side.mr.addr().to_be_bytes());
        hello.extend_from_slice(&side.mr.rkey().0.to_be_bytes());
        oob.send(&hello).await?;
        let peer = oob.recv().await?;
        if peer.len() != HELLO_LEN {
            return Err(KvError::Protocol(format!("hello of {} bytes", peer.len())));
        }
        let (remote, region) = peer.split_at(Remote::LEN);
        let remote = Remote::from_bytes(remote).map_err(|e| KvError::Protocol(e.to_string()))?;
        let addr = u64::from_be_bytes(region[..8].try_into().unwrap());
        let rkey = Rkey(u32::from_be_bytes(region[8..].try_into().unwrap()));

        let conn = Conn { side, peer_mr: RemoteTarget { addr, rkey } };
        verbs("to_init", connect::to_init(&conn.side.qp, ACCESS, 0))?;
        conn.post_recv()?;
        let tuning = Tuning { sq_psn: psn, ..*t };
        verbs("to_rts", connect::to_rts(&conn.side.qp, Some(remote), &tuning))?;
        // Both sides' receives are posted before either sends.
        oob.send(b"ready").await?;
        oob.recv().await?;
        Ok(conn)
    }

    fn post_recv(&self) -> Result<(), KvError> {
        let wr = RecvWr { wr_id: 0, sg_list: vec![self.side.mr.sge(RECV_AT, MAX_MESSAGE as u32)] };
        verbs("post_recv", self.side.qp.post_recv(&[wr]).map_err(|(_, e)| e))
    }

    fn post(&self, wr: SendWr) -> Result<(), KvError> {
        verbs("post_send", self.side.qp.post_send(&[wr]).map_err(|(_, e)| e))
    }

    /// SENDs `text` from the send buffer.
    fn post_send(&self, text: &str) -> Result<(), KvError> {
        if text.len() > MAX_MESSAGE {
            return Err(KvError::Protocol(format!("a message of {} bytes", text.len())));
        }
        verbs("write", self.side.mr.write(SEND_AT, text.as_bytes()))?;
        let mut wr = SendWr::new(1, WrOpcode::Send);
        wr.sg_list = vec![self.side.mr.sge(SEND_AT, text.len() as u32)];
        wr.flags = SendFlags::SIGNALED;
        self.post(wr)
    }

    /// The next completion; one in error is an error.
    async fn next(&self) -> Result<WorkCompletion, KvError> {
        let wc = verbs("cq", self.side.cq.next().await)?;
        match wc.status {
            WcStatus::Success => Ok(wc),
            status => Err(KvError::Completion(status)),
        }
    }

    /// The message a receive completion delivered.
    fn received(&self, wc: &WorkCompletion) -> Result<String, KvError> {
        let bytes = verbs("read", self.side.mr.read_vec(RECV_AT, wc.byte_len as usize))?;
        String::from_utf8(bytes).map_err(|_| KvError::Protocol("a message not in UTF-8".into()))
    }

    /// The 8-byte word `i` of this side's region.
    fn word(&self, i: u32) -> Result<u64, KvError> {
        let bytes = verbs("read", self.side.mr.read_vec(WORDS_AT + 8 * u64::from(i), 8))?;
        Ok(u64::from_le_bytes(bytes.try_into().unwrap()))
    }
}

/// The client: one connection to a server, one call at a time.
pub struct KvClient<E: Env> {
    conn: Conn,
    env: E,
    deadline: Duration,
    /// Counter slots the server handed out, by key.
    slots: BTreeMap<String, u32>,
    /// The error that broke the connection.
    failed: Option<KvError>,
}

impl<E: Env> KvClient<E> {
    /// Connects to the server at the other end of `oob`.
    pub async fn connect(
        ctx: &Context,
        oob: &impl Oob,
        env: E,
        options: &Options,
    ) -> Result<KvClient<E>, KvError> {
        let conn = within(&env, options.deadline, Conn::open(ctx, oob, 0, &options.tuning)).await?;
        Ok(KvClient { conn, env, deadline: options.deadline, slots: BTreeMap::new(), failed: None })
    }

    /// Sets `key` to `value`.
    pub async fn put(&mut self, key: &str, value: &str) -> Result<(), KvError> {
        check_key(key)?;
        match self.call(&format!("put {key} {value}")).await?.as_str() {
            "ok" => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Reads `key`.
    pub async fn get(&mut self, key: &str) -> Result<Option<String>, KvError> {
        check_key(key)?;
        let answer = self.call(&format!("get {key}")).await?;
        match answer.split_once(' ') {
            _ if answer == "none" => Ok(None),
            Some(("val", value)) => Ok(Some(value.to_owned())),
            _ => Err(unexpected(&answer)),
        }
    }

    /// Adds one to the counter `key` by FETCH_ADD in the server's memory;
    /// returns its new value.
    pub async fn incr(&mut self, key: &str) -> Result<u64, KvError> {
        check_key(key)?;
        let slot = match self.slots.get(key) {
            Some(&slot) => slot,
            None => {
                let answer = self.call(&format!("ctr {key}")).await?;
                let slot = match answer.split_once(' ') {
                    Some(("ctr", n)) => n.parse().map_err(|_| unexpected(&answer))?,
                    _ => return Err(unexpected(&answer)),
                };
                self.slots.insert(key.to_owned(), slot);
                slot
            }
        };
        self.usable()?;
        let old = within(&self.env, self.deadline, Self::fetch_add(&self.conn, slot)).await;
        Ok(self.note(old)? + 1)
    }

    /// Applies one [`Op`].
    pub async fn apply(&mut self, op: &Op) -> Result<Reply, KvError> {
        match op {
            Op::Put(k, v) => self.put(k, v).await.map(|()| Reply::Done),
            Op::Get(k) => self.get(k).await.map(Reply::Value),
            Op::Incr(k) => self.incr(k).await.map(Reply::Count),
        }
    }

    /// Says goodbye: returns once the server has seen its last answer
    /// acknowledged (then this side may close its device).
    pub async fn close(mut self, oob: &impl Oob) -> Result<(), KvError> {
        match self.call("bye").await?.as_str() {
            "bye" => {}
            other => return Err(unexpected(other)),
        }
        within(&self.env, self.deadline, async { Ok(oob.recv().await?) }).await?;
        Ok(())
    }

    /// One request and its answer, within the deadline.
    async fn call(&mut self, request: &str) -> Result<String, KvError> {
        self.usable()?;
        let result = within(&self.env, self.deadline, Self::exchange(&self.conn, request)).await;
        let answer = self.note(result)?;
        // A refusal is an answer: the connection is fine.
        match answer.strip_prefix("err ") {
            Some(why) => Err(KvError::Server(why.to_owned())),
            None => Ok(answer),
        }
    }

    /// The error that broke the connection, if one did.
    fn usable(&self) -> Result<(), KvError> {
        self.failed.clone().map_or(Ok(()), Err)
    }

    /// Keeps an error of the connection (a completion in error, a
    /// timeout): it breaks the connection for good.
    fn note<T>(&mut self, result: Result<T, KvError>) -> Result<T, KvError> {
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    async fn exchange(conn: &Conn, request: &str) -> Result<String, KvError> {
        conn.post_send(request)?;
        let (mut sent, mut answer) = (false, None);
        while !sent || answer.is_none() {
            let wc = conn.next().await?;
            match wc.opcode {
                WcOpcode::Send => sent = true,
                WcOpcode::Recv => answer = Some(conn.received(&wc)?),
                other => return Err(KvError::Protocol(format!("a {other:?} completion"))),
            }
        }
        // The receive for the next answer, before the next request.
        conn.post_recv()?;
        Ok(answer.unwrap())
    }

    async fn fetch_add(conn: &Conn, slot: u32) -> Result<u64, KvError> {
        let mut wr = SendWr::new(2, WrOpcode::AtomicFetchAndAdd);
        wr.sg_list = vec![conn.side.mr.sge(WORDS_AT, 8)];
        wr.remote = RemoteTarget {
            addr: conn.peer_mr.addr + WORDS_AT + 8 * u64::from(slot),
            rkey: conn.peer_mr.rkey,
        };
        wr.compare_add = 1;
        conn.post(wr)?;
        match conn.next().await? {
            wc if wc.opcode == WcOpcode::FetchAdd => conn.word(0),
            wc => Err(KvError::Protocol(format!("a {:?} completion", wc.opcode))),
        }
    }
}

/// A key is one word: not empty, no white space.
fn check_key(key: &str) -> Result<(), KvError> {
    match key.is_empty() || key.contains(char::is_whitespace) {
        true => Err(KvError::Protocol(format!("a key must be one word: {key:?}"))),
        false => Ok(()),
    }
}

fn unexpected(answer: &str) -> KvError {
    KvError::Protocol(format!("unexpected answer {answer:?}"))
}

/// The server: answers the client at the other end of `oob` until it
/// says `bye`, then returns the store's contents. It waits for requests
/// without a deadline (an idle client is no error).
pub async fn serve(ctx: &Context, oob: &impl Oob, options: &Options) -> Result<Store, KvError> {
    let conn = Conn::open(ctx, oob, 1000, &options.tuning).await?;
    let mut values = BTreeMap::new();
    let mut slots: BTreeMap<String, u32> = BTreeMap::new();
    // Whether the last answer's SEND has not completed yet: its buffer is
    // not ours to overwrite until it has.
    let mut sending = false;
    loop {
        let wc = conn.next().await?;
        match wc.opcode {
            WcOpcode::Send => {
                sending = false;
                continue;
            }
            WcOpcode::Recv => {}
            other => return Err(KvError::Protocol(format!("a {other:?} completion"))),
        }
        let request = conn.received(&wc)?;
        conn.post_recv()?;
        let (verb, rest) = request.split_once(' ').unwrap_or((&request, ""));
        let answer = match (verb, rest.split_once(' ')) {
            ("put", Some((key, value))) => {
                values.insert(key.to_owned(), value.to_owned());
                "ok".to_owned()
            }
            ("get", _) => match values.get(rest) {
                Some(value) => format!("val {value}"),
                None => match slots.get(rest) {
                    Some(&slot) => format!("val {}", conn.word(slot)?),
                    None => "none".to_owned(),
                },
            },
            ("ctr", _) => {
                let next = slots.len() as u32;
                match slots.get(rest) {
                    Some(&slot) => format!("ctr {slot}"),
                    None if next < COUNTERS => {
                        slots.insert(rest.to_owned(), next);
                        format!("ctr {next}")
                    }
                    None => "err no counter left".to_owned(),
                }
            }
            ("bye", _) => "bye".to_owned(),
            _ => format!("err bad request {request:?}"),
        };
        while sending {
            match conn.next().await?.opcode {
                WcOpcode::Send => sending = false,
                other => return Err(KvError::Protocol(format!("a {other:?} completion"))),
            }
        }
        conn.post_send(&answer)?;
        sending = true;
        if verb == "bye" {
            break;
        }
    }
    // The last answer acknowledged: the client may close its device.
    while conn.next().await?.opcode != WcOpcode::Send {}
    oob.send(b"bye").await?;
    let mut counters = BTreeMap::new();
    for (key, slot) in slots {
        counters.insert(key, conn.word(slot)?);
    }
    Ok(Store { values, counters })
}
