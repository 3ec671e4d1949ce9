//! # uroce-cm: the InfiniBand Communication Manager, sans IO
//!
//! The CM sets up and tears down connections by exchanging 256-byte MADs
//! with the peer's CM, carried as UD SENDs between the two ports' QP1
//! with the GSI Q_Key 0x80010000. This crate is that protocol as a pure
//! state machine, written after IBA vol 1 chapter 12 and the way Linux's
//! `ib_cm` (drivers/infiniband/core/cm.c) runs it for RoCE, so that uroce
//! can connect to Linux rxe's kernel CM and rdma_cm programs (rping,
//! ucmatose, udaddy, perftest `-R`).
//!
//! It does no I/O and owns no clock, thread, socket or randomness, in the
//! manner of quinn-proto: time comes in as `now_ns` (nanoseconds on any
//! monotonic scale); received MADs come in through [`Cm::receive`]; the
//! consumer's requests are methods ([`Cm::connect`], [`Cm::accept`],
//! [`Cm::reject`], [`Cm::ready_to_use`], [`Cm::disconnect`], ...); what to
//! send is polled with [`Cm::poll_transmit`], what to tell the consumer
//! with [`Cm::poll_event`], and when to wake up with [`Cm::poll_timeout`]
//! and [`Cm::handle_timeout`]. Local comm IDs come from the seed in
//! [`CmConfig`].
//!
//! ## Exchanges and states
//!
//! ```text
//!  active                                passive (listen(service ID))
//!  connect ── REQ ──────────────────────▶ ConnectRequest event   ReqRcvd
//!  ReqSent     (retried; MRA extends)     accept / reject / mra
//!           ◀───────────────────── REP ── RepSent (retried)
//!  ConnectReply event  RepRcvd
//!  ready_to_use ── RTU ─────────────────▶ Established event (or established())
//!  Established event
//!  disconnect ── DREQ (retried) ────────▶ Disconnected event, DREP sent
//!           ◀──────────────────── DREP ── Timewait
//!  Disconnected event, Timewait ── … ──▶ TimewaitExit event, ID freed
//!
//!  sidr_request ── SIDR_REQ (retried) ──▶ SidrRequest event  SidrReqRcvd
//!  SidrReply event ◀──────── SIDR_REP ── sidr_reply           SidrRepSent
//! ```
//!
//! Timeouts follow Linux: an IBA exponent `t` counts as `2^(t-8)` ms; a REQ
//! waits `2 × packet lifetime + remote CM response timeout` (6144 ms with
//! rdma_cm's 18 and 20), a REP the REQ's local CM response timeout (4096
//! ms), a DREQ the same as the side's handshake message; each is sent
//! `1 + max CM retries` times (16) before the consumer is told
//! ([`Event::Unreachable`], [`Event::Disconnected`] with
//! [`DisconnectCause::DreqTimedOut`]). Time-wait lasts the path's ACK
//! timeout (2048 ms for rdma_cm on RoCE).
//!
//! Every received message must match what is outstanding: the comm IDs of
//! both sides, the peer's GID, the state. Anything else is dropped and
//! counted in [`Counters`]. Duplicates are answered as Linux answers them:
//! an MRA again for a REQ while MRAed, a REJ stale connection for a REQ in
//! time-wait, the RTU again for a REP after it, a DREP again for a DREQ in
//! time-wait (and a DREP for a DREQ naming no connection at all).
//!
//! ## Where this follows Linux, and where not
//!
//! Followed: the timeout arithmetic (`cm_convert_to_ms`, `cm_ack_timeout`);
//! TIDs (agent number `<< 32` | the byte-swapped local comm ID, the same TID
//! on a connection's REQ and DREQ, answers echoing the TID they answer);
//! `cm_issue_rej` for a REQ nobody listens to (reason 8, no local ID); a
//! duplicate REQ is ignored while the REP is outstanding or the connection
//! established (the REP's own retransmission answers it), answered with the
//! MRA while MRAed and with REJ stale connection in time-wait; a new REQ from
//! a QP that already has a connection is refused as stale and the old
//! connection disconnected; any RTU that establishes nothing is a duplicate;
//! a DREQ naming no connection still gets a DREP; a REQ, REP, DREQ or SIDR_REQ
//! that runs out of retries raises its event without sending anything; a
//! DREQ must name the connection's QPN. Consumer calls mirror `ib_send_cm_*`
//! (REJ of a REQ before any MRA carries no local ID), and [`Cm::destroy`]
//! sends what `ib_destroy_cm_id` sends.
//!
//! Not followed: a DREQ received is answered with a DREP at once (Linux lets
//! the consumer's `rdma_disconnect` send it); every message must also come
//! from the GID of the CM ID's peer (Linux matches comm IDs only); an
//! answered SIDR_REQ is kept [`SIDR_HOLD_MS`] to answer its duplicates with
//! the same SIDR_REP instead of raising a second event; an ID that fails or
//! is rejected is freed at once (Linux keeps an idle `ib_cm_id` until the
//! consumer destroys it), so later calls on it return [`CmError::UnknownId`];
//! duplicate REQs are found by (peer GID, remote comm ID) rather than
//! (remote comm ID, remote CA GUID), and stay found during time-wait (Linux
//! drops the connection from that table on entering time-wait, so its REJ
//! stale for a REQ in time-wait rarely fires); the stale-QPN check is made
//! on REQs only, not on REPs.
//!
//! ## Not supported
//!
//! - Alternate paths: LAP and APR are dropped (counted as unsupported),
//!   as Linux does on RoCE; REQs carry no alternate path.
//! - RD and XRC transports (a REQ for them gets REJ 9), peer-to-peer REQs,
//!   service ID masks, shared listens, ClassPortInfo and redirection.
//! - ECE vendor options (vendor ID and attribute modifier stay 0).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod active;
mod config;
mod conn;
mod counters;
mod disconnect;
mod engine;
mod error;
mod event;
mod listen;
mod mad;
mod passive;
mod reject;
mod sidr;
mod tid;
mod timers;

pub use config::{AcceptParams, CmConfig, ConnectParams, Peer, SidrParams, SidrReplyParams};
pub use conn::State;
pub use counters::Counters;
pub use engine::{Cm, Transmit};
pub use error::CmError;
pub use event::{CmId, DisconnectCause, Event, TimedOut};
pub use passive::MRA_DELAY;
pub use sidr::SIDR_HOLD_MS;
pub use tid::transaction_id;
pub use timers::{ack_timeout, iba_time_to_ms, NS_PER_MS};
