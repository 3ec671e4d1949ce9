//! Connecting an RC QP to a peer's over an [`Oob`]: what every node task
//! of a two-sided test does first ([`connect_rc`]).

use crate::oob::Oob;
use std::fmt;
use std::io;
use uroce_verbs::connect::{self, BadHello, Endpoint, Remote, Tuning};
use uroce_verbs::{Access, Context};

/// The message each side sends once its QP is in RTS.
const READY: &[u8] = b"ready";

/// Why [`connect_rc`] failed.
#[derive(Debug)]
pub enum ConnectError {
    /// A verbs call failed (GID query, a QP transition, or `in_init`'s).
    Verbs(uroce_verbs::Error),
    /// The side channel failed (the peer gone: `UnexpectedEof`).
    Oob(io::Error),
    /// The peer's hello was not a [`Remote`]'s 24 bytes.
    Hello(BadHello),
    /// The peer answered something else than "ready".
    NotReady(Vec<u8>),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Verbs(e) => write!(f, "connect: {e}"),
            ConnectError::Oob(e) => write!(f, "connect: side channel: {e}"),
            ConnectError::Hello(e) => write!(f, "connect: {e}"),
            ConnectError::NotReady(got) => write!(f, "connect: the peer sent {got:?}, not ready"),
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<uroce_verbs::Error> for ConnectError {
    fn from(e: uroce_verbs::Error) -> ConnectError {
        ConnectError::Verbs(e)
    }
}

impl From<io::Error> for ConnectError {
    fn from(e: io::Error) -> ConnectError {
        ConnectError::Oob(e)
    }
}

/// Connects `side`'s RC QP (in RESET) to the peer's over `oob`, the peer
/// doing the same: sends this side's hello ([`Remote::to_bytes`]: the GID
/// at `tuning.sgid_index`, the QPN, `psn`), reads the peer's, moves the QP
/// to INIT with `access`, runs `in_init` (post the first receives there:
/// they are in place before the peer may send), moves it to RTS with `psn`
/// as its first PSN and the rest of `tuning`, then swaps "ready" with the
/// peer, so neither sends before both are in RTS. Returns the peer's
/// [`Remote`].
pub async fn connect_rc(
    side: &Endpoint,
    ctx: &Context,
    oob: &impl Oob,
    psn: u32,
    tuning: &Tuning,
    access: Access,
    in_init: impl FnOnce(&Endpoint) -> uroce_verbs::Result<()>,
) -> Result<Remote, ConnectError> {
    let hello = side.remote(ctx, tuning.sgid_index, psn)?.to_bytes();
    oob.send(&hello).await?;
    let remote = Remote::from_bytes(&oob.recv().await?).map_err(ConnectError::Hello)?;
    connect::to_init(&side.qp, access, 0)?;
    in_init(side)?;
    connect::to_rts(&side.qp, Some(remote), &Tuning { sq_psn: psn, ..*tuning })?;
    oob.send(READY).await?;
    let ready = oob.recv().await?;
    if ready != READY {
        return Err(ConnectError::NotReady(ready));
    }
    Ok(remote)
}
