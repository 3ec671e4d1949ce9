//! `librdmacm.so.1` for uroce: a drop-in for rdma-core 44's library, so
//! that unmodified RDMA CM programs (`rping`, `ucmatose`, `udaddy`,
//! perftest with `-R`, pyverbs' `CMID`...) run on a uroce device
//! (`docs/rdmacm.md`).
//!
//! It talks to the device through the verbs of the `libibverbs.so.1`
//! loaded in the process (`verbs.rs`: C declarations resolved at load
//! time; under `uroce run` that library is uroce's), never through a second
//! copy of them, so `id->verbs` is the very context the program's own verbs
//! calls see.
//!
//! What works now, with librdmacm's and the kernel's checks and errors:
//! event channels (an eventfd readable exactly while an event waits,
//! blocking or EAGAIN as librdmacm), ids (with a channel or synchronous),
//! binding (the address must be in a device's GID table; ports per port
//! space, EADDRINUSE/EADDRNOTAVAIL as the kernel's `cma_check_port`, port
//! 0 picks a free one), address and route resolution (RoCE needs no
//! message: ADDR_RESOLVED, ROUTE_RESOLVED with the path the kernel makes,
//! or ADDR_ERROR), QPs, CQs and SRQs made for an id (the QP moved to INIT,
//! or to RTS for UD, as librdmacm), `rdma_init_qp_attr`, options, `rdma_migrate_id`, `rdma_create_ep` (everything
//! up to the connection), the device list, `rdma_getaddrinfo`, ECE, the
//! event strings, `rpoll`/`rselect`.
//!
//! Connections go through the CM uroce's device runs on its QP1
//! (`cm_link.rs`: the door, a private entry point of uroce's libibverbs
//! and the thread taking the CM's events; `cm.rs`: what the kernel's and
//! librdmacm's `cma.c` do with them): `rdma_listen`, `rdma_connect`,
//! `rdma_accept`, `rdma_reject`, `rdma_establish`, `rdma_notify`,
//! `rdma_disconnect`, `rdma_get_request`, RC and UC (REQ, REP, RTU, REJ,
//! DREQ/DREP) and UD (SIDR), with their events. Each checks its arguments
//! and the id's state first, as librdmacm and the kernel do. Multicast
//! (`rdma_join_multicast` and friends) as the kernel's rdma_cm does on
//! RoCEv2. Not offered yet: rsockets (`rsocket`: ENOSYS; the other `r*`
//! calls EBADF).
//!
//! | file | what |
//! | --- | --- |
//! | `abi/` | the C structs and constants by header (`verbs.rs`, `sa.rs`, `rdma_cma.rs`, `consts.rs`), their layout checked against the headers (`layout.rs`) |
//! | `exports.rs` | the 68 exported names and the functions behind them |
//! | `verbs.rs` | the verbs called, resolved in the process's libibverbs |
//! | `devices.rs` | devices, their addresses (GID tables), PDs |
//! | `channel.rs` | event channels and events |
//! | `id/` | ids: bind, resolve (`resolve.rs`), QPs (`qp.rs`), options (`options.rs`), the CM calls' checks (`connect.rs`) |
//! | `multicast.rs` | `rdma_join_multicast`, `rdma_leave_multicast`: groups, attach on the event |
//! | `ports.rs` | the port spaces |
//! | `addr.rs` | socket addresses |
//! | `addrinfo.rs` | `rdma_getaddrinfo` |
//! | `cm_link.rs` | the door to the device's CM, the CM events' thread |
//! | `cm/` | the RDMA CM over the device's CM: the calls (`calls.rs`), an incoming request (`request.rs`), events and the deferred QP transitions (`events.rs`) |
//! | `rsocket.rs` | the rsocket calls |
//! | `ffi.rs` | errno, and the guard that keeps panics from crossing into C |

pub mod abi;
mod addr;
mod addrinfo;
mod channel;
mod cm;
mod cm_link;
mod devices;
mod exports;
mod ffi;
mod id;
mod multicast;
mod ports;
mod rsocket;
mod verbs;
