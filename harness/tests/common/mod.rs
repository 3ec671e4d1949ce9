//! A tiny request/response program over RC SEND/RECV, written once as
//! async code against `uroce-verbs` + `Env` + `Oob`: the tests run it in
//! the simulator (`harness.rs`) and on the real UDP runtime (`real.rs`).
//!
//! The client sends `req <i>`, the server answers `ack <i>`; each side
//! exchanges its GID, QPN and first PSN over the side channel first.

#![allow(dead_code)]

use std::io;
use std::time::Duration;
use uroce_harness::{connect_rc, ConnectError, Env, Oob};
use uroce_verbs::connect::{self, Endpoint, Tuning, ALL_ACCESS};
use uroce_verbs::{Context, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};

/// Bytes per message slot.
const SLOT: u32 = 64;

/// What went wrong for a side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppError {
    /// A work completion in error.
    Completion(WcStatus),
    /// A verbs call failed.
    Verbs(String),
    /// The side channel failed.
    Oob(io::ErrorKind),
    /// The peer answered something else.
    Protocol(String),
}

impl From<io::Error> for AppError {
    fn from(e: io::Error) -> AppError {
        AppError::Oob(e.kind())
    }
}

impl From<ConnectError> for AppError {
    fn from(e: ConnectError) -> AppError {
        match e {
            ConnectError::Oob(e) => AppError::Oob(e.kind()),
            ConnectError::Verbs(e) => AppError::Verbs(format!("connect: {e}")),
            other => AppError::Protocol(other.to_string()),
        }
    }
}

fn verbs<T, E: std::fmt::Display>(
    what: &str,
) -> impl FnOnce(Result<T, E>) -> Result<T, AppError> + '_ {
    move |r| r.map_err(|e| AppError::Verbs(format!("{what}: {e}")))
}

/// One side's verbs objects.
pub struct Conn(Endpoint);

/// Posts one receive of a slot on `side`.
fn post_recv_on(side: &Endpoint, wr_id: u64) -> uroce_verbs::Result<()> {
    let sge = side.mr.sge(0, SLOT);
    side.qp.post_recv(&[RecvWr { wr_id, sg_list: vec![sge] }]).map_err(|(_, e)| e)
}

impl Conn {
    fn post_recv(&self, wr_id: u64) -> Result<(), AppError> {
        verbs("post_recv")(post_recv_on(&self.0, wr_id))
    }

    fn post_send(&self, wr_id: u64, text: &str) -> Result<(), AppError> {
        verbs("write")(self.0.mr.write(u64::from(SLOT), text.as_bytes()))?;
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![self.0.mr.sge(u64::from(SLOT), text.len() as u32)];
        wr.flags = SendFlags::SIGNALED;
        verbs("post_send")(self.0.qp.post_send(&[wr]).map_err(|(_, e)| e))
    }

    /// Awaits the next completion; a status in error is an error.
    async fn next(&self) -> Result<(WcOpcode, String), AppError> {
        let wc = verbs("cq")(self.0.cq.next().await)?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        let mut text = String::new();
        if wc.opcode == WcOpcode::Recv {
            let mut buf = vec![0u8; wc.byte_len as usize];
            verbs("read")(self.0.mr.read(0, &mut buf))?;
            text = String::from_utf8_lossy(&buf).into_owned();
        }
        Ok((wc.opcode, text))
    }
}

/// Creates an RC QP, swaps (GID, QPN, PSN) with the
/// peer over `oob`, brings the QP to RTS with a first receive posted.
pub async fn connect(
    ctx: &Context,
    oob: &impl Oob,
    psn: u32,
    tuning: &Tuning,
) -> Result<Conn, AppError> {
    let side = Endpoint::rc(ctx, 64, connect::cap(16, 1, 0), u64::from(2 * SLOT), ALL_ACCESS);
    let conn = Conn(verbs("open")(side)?);

    let first_recv = |side: &Endpoint| post_recv_on(side, 0);
    connect_rc(&conn.0, ctx, oob, psn, tuning, ALL_ACCESS, first_recv).await?;
    Ok(conn)
}

/// The server: answers `rounds` requests, then returns how many it
/// answered.
pub async fn serve(
    ctx: &Context,
    oob: &impl Oob,
    rounds: u32,
    tuning: &Tuning,
) -> Result<u32, AppError> {
    let conn = connect(ctx, oob, 1000, tuning).await?;
    for i in 0..rounds {
        let request = loop {
            match conn.next().await? {
                (WcOpcode::Recv, text) => break text,
                _ => continue, // the previous answer's completion
            }
        };
        if request != format!("req {i}") {
            return Err(AppError::Protocol(format!("request {i}: {request:?}")));
        }
        conn.post_recv(u64::from(i) + 1)?;
        conn.post_send(u64::from(i), &format!("ack {i}"))?;
    }
    // The last answer's completion.
    while conn.next().await?.0 != WcOpcode::Send {}
    // The client closes its device only after this.
    oob.send(b"bye").await?;
    Ok(rounds)
}

/// The client: `rounds` requests, `think` apart; returns the time (from
/// `env`) each answer arrived.
pub async fn run_client(
    ctx: &Context,
    oob: &impl Oob,
    env: &impl Env,
    rounds: u32,
    think: Duration,
    tuning: &Tuning,
) -> Result<Vec<Duration>, AppError> {
    let conn = connect(ctx, oob, 0, tuning).await?;
    let mut times = Vec::new();
    for i in 0..rounds {
        conn.post_send(u64::from(i), &format!("req {i}"))?;
        let (mut sent, mut answer) = (false, None);
        while !sent || answer.is_none() {
            match conn.next().await? {
                (WcOpcode::Send, _) => sent = true,
                (WcOpcode::Recv, text) => answer = Some(text),
                (other, _) => return Err(AppError::Protocol(format!("{other:?}"))),
            }
        }
        if answer.as_deref() != Some(format!("ack {i}").as_str()) {
            return Err(AppError::Protocol(format!("answer {i}: {answer:?}")));
        }
        times.push(env.now());
        conn.post_recv(u64::from(i) + 1)?;
        env.sleep(think).await;
    }
    // The server saw its last answer acknowledged.
    oob.recv().await?;
    Ok(times)
}
