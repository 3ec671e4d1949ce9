//! The uroce verbs API: what applications link.
//!
//! It plays the part of libibverbs plus a vendor user driver. Names and
//! semantics follow libibverbs: open a [`Context`] on a device, allocate a
//! protection domain ([`Pd`]), register memory ([`Mr`]), create completion
//! queues ([`Cq`]) and queue pairs ([`Qp`]), move QPs through their states
//! with [`Qp::modify`], post chained work requests ([`Qp::post_send`],
//! [`Qp::post_recv`] report which WR failed) and poll completions
//! ([`Cq::poll`]).
//!
//! Underneath, the driver writes WQEs into rings in host memory, publishes
//! producer indices and rings doorbells; the HCA writes CQEs into the CQ
//! ring. The control path (create, modify, destroy) goes through the HCA's
//! command interface, as a driver talks to firmware.
//!
//! Completions can also be awaited: [`Cq::next`] is a future (and
//! [`Cq::poll_completion`] its poll function) that takes a completion
//! from the ring, or arms the CQ and sleeps until the device's completion
//! event wakes the task. The waker is called from wherever the device's
//! events are handed over — the UDP runtime's background thread, the
//! simulated fabric's step — so it works under any executor (tokio's
//! current-thread or multi-thread runtime, a hand-written `block_on`)
//! with no executor code here and no busy polling. `Cq` is `Send + Sync`;
//! one task at a time awaits a given CQ.
//!
//! ```no_run
//! # async fn example(cq: &uroce_verbs::Cq) -> uroce_verbs::Result<()> {
//! let wc = cq.next().await?; // sleeps until the CQ's completion event
//! println!("wr {} finished: {:?}", wc.wr_id, wc.status);
//! # Ok(())
//! # }
//! ```
//!
//! Memory the HCA writes is only reached through copies ([`Mr::read`],
//! [`Mr::write`]): the safe API hands out no reference into it, so the
//! application can never race the device.
//!
//! Everything an application names is exported here, each under one name:
//! the objects, the work requests, and the device interface's vocabulary
//! (opcodes, flags, states, statuses, keys, attributes, events), so that
//! an application depends on this crate alone.
//!
//! The files, by object:
//!
//! | file | what |
//! | --- | --- |
//! | `context.rs` | [`Context`]: open, query, and the driver's one link to the HCA (commands, doorbells) |
//! | `events.rs` | [`CompChannel`], [`Context::next_event`], [`Context::async_fd`]: completion channels, asynchronous events; the wakers of awaited CQs |
//! | `pd.rs` | [`Pd`], [`Ah`] |
//! | `mr.rs` | [`Mr`], [`Mw`]: registration, and every access to registered memory; `mr/rereg.rs`: re-registration ([`Rereg`]) |
//! | `cq.rs` | [`Cq`]: create, poll, await ([`Cq::next`], [`Next`]), arm, resize, destroy |
//! | `qp.rs` | [`Qp`], [`QpInitAttr`]: create, modify, post send and receive chains |
//! | `srq.rs` | [`Srq`] |
//! | `wr.rs` | [`SendWr`], [`RecvWr`], [`RemoteTarget`], and the WQE bytes written for them |
//! | `ring.rs` | the driver's side of the rings: produces WQEs, consumes CQEs |
//! | `connect.rs` | [`connect`]: the usual RESET → INIT → RTR → RTS steps, the side-channel hello, a side's objects, two local QPs connected |
//! | `error.rs` | [`Error`], [`Result`], [`PostResult`] |

pub mod connect;
mod context;
mod cq;
mod error;
mod events;
mod mr;
mod pd;
mod qp;
mod ring;
mod ring_pool;
mod srq;
mod wr;

pub use context::Context;
pub use cq::{Cq, Next};
pub use error::{Error, PostResult, Result};
pub use events::CompChannel;
pub use mr::{Mr, Mw, Rereg};
pub use pd::{Ah, Pd};
pub use qp::{Qp, QpInitAttr};
pub use srq::Srq;
pub use wr::{RecvWr, RemoteTarget, SendWr};

// The device interface's vocabulary, as applications use it.

pub use uroce_device::command::{AhAttr, CmdError, DeviceAttr, Gid, PortAttr, QpAttr, QpCap};
/// A work completion (`ibv_wc`): the CQE the HCA wrote, decoded.
pub use uroce_device::cqe::Cqe as WorkCompletion;
pub use uroce_device::mem::MemFault;
pub use uroce_device::types::{
    Access, AttrMask, EventType, Lkey, Mtu, Psn, Qkey, QpState, QpType, Qpn, Rkey, SendFlags,
    WcFlags, WcOpcode, WcStatus, WrOpcode,
};
pub use uroce_device::wqe::Sge;
pub use uroce_device::Event;
