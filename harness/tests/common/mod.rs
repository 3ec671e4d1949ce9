//! A tiny request/response program over RC SEND/RECV, written once as
//! async code against `uroce-verbs` + `Env` + `Oob`: the tests run it in
//! the simulator (`harness.rs`) and on the real UDP runtime (`real.rs`).
//!
//! The client sends `req <i>`, the server answers `ack <i>`; each side
//! exchanges its GID, QPN and first PSN over the side channel first.

#![allow(dead_code)]

use std::io;
use std::time::Duration;
use uroce_harness::{Env, Oob};
use uroce_verbs::connect::{self, Remote, Tuning};
use uroce_verbs::{
    Access, Context, Cq, Gid, Mr, Mtu, Pd, Qp, QpCap, QpInitAttr, QpType, Qpn, RecvWr, SendFlags,
    SendWr, WcOpcode, WcStatus, WrOpcode,
};

/// Bytes per message slot.
const SLOT: u32 = 64;
const ALL_ACCESS: Access = Access(1 | 2 | 4 | 8 | 16);

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

fn verbs<T, E: std::fmt::Display>(
    what: &str,
) -> impl FnOnce(Result<T, E>) -> Result<T, AppError> + '_ {
    move |r| r.map_err(|e| AppError::Verbs(format!("{what}: {e}")))
}

/// The connection tuning: ACK timeout `timeout` (8 = 1 ms), 7 retries,
/// infinite RNR retries, path MTU 1024.
pub fn tuning(timeout: u8) -> Tuning {
    Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 0,
        timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 16,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    }
}

/// One side's verbs objects (the QP first: dropped before its CQ).
pub struct Conn {
    qp: Qp,
    mr: Mr,
    cq: Cq,
    _pd: Pd,
}

impl Conn {
    fn post_recv(&self, wr_id: u64) -> Result<(), AppError> {
        let sge = self.mr.sge(0, SLOT);
        verbs("post_recv")(
            self.qp.post_recv(&[RecvWr { wr_id, sg_list: vec![sge] }]).map_err(|(_, e)| e),
        )
    }

    fn post_send(&self, wr_id: u64, text: &str) -> Result<(), AppError> {
        verbs("write")(self.mr.write(u64::from(SLOT), text.as_bytes()))?;
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.sg_list = vec![self.mr.sge(u64::from(SLOT), text.len() as u32)];
        wr.flags = SendFlags::SIGNALED;
        verbs("post_send")(self.qp.post_send(&[wr]).map_err(|(_, e)| e))
    }

    /// Awaits the next completion; a status in error is an error.
    async fn next(&self) -> Result<(WcOpcode, String), AppError> {
        let wc = verbs("cq")(self.cq.next().await)?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        let mut text = String::new();
        if wc.opcode == WcOpcode::Recv {
            let mut buf = vec![0u8; wc.byte_len as usize];
            verbs("read")(self.mr.read(0, &mut buf))?;
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
    let pd = verbs("alloc_pd")(ctx.alloc_pd())?;
    let cq = verbs("create_cq")(ctx.create_cq(64))?;
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let qp = verbs("create_qp")(pd.create_qp(&init))?;
    let mr = verbs("alloc_mr")(pd.alloc_mr(u64::from(2 * SLOT), ALL_ACCESS))?;
    let conn = Conn { qp, mr, cq, _pd: pd };

    let gid = verbs("query_gid")(ctx.query_gid(tuning.sgid_index))?;
    let mut hello = gid.0.to_vec();
    hello.extend_from_slice(&conn.qp.qpn().value().to_be_bytes());
    hello.extend_from_slice(&psn.to_be_bytes());
    oob.send(&hello).await?;
    let peer = oob.recv().await?;
    if peer.len() != 24 {
        return Err(AppError::Protocol(format!("hello of {} bytes", peer.len())));
    }
    let word = |at: usize| u32::from_be_bytes(peer[at..at + 4].try_into().unwrap());
    let remote =
        Remote { gid: Gid(peer[..16].try_into().unwrap()), qpn: Qpn::new(word(16)), psn: word(20) };
    verbs("to_init")(connect::to_init(&conn.qp, ALL_ACCESS, 0))?;
    conn.post_recv(0)?;
    verbs("to_rts")(connect::to_rts(&conn.qp, Some(remote), &Tuning { sq_psn: psn, ..*tuning }))?;
    // Both sides' receives are posted before either sends.
    oob.send(b"ready").await?;
    oob.recv().await?;
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
