//! `libibverbs.so.1` for uroce: a drop-in for rdma-core 44's library, so
//! that unmodified verbs programs (`ibv_devinfo`, `ibv_rc_pingpong`,
//! perftest...) run on a uroce device with no recompile, no root and no
//! kernel module (`docs/libibverbs.md`).
//!
//! The library is a thin C face on the Rust driver, `uroce_verbs`: each
//! verb converts the C structs into a `uroce_verbs` call and back (WR to
//! WQE, CQE to completion and every check live there, once). The device
//! comes from the environment (`UROCE_ADDR`, `UROCE_LINK`/`UROCE_TAP`,
//! `UROCE_FAULTS`, `UROCE_CAPTURE`...: `uroce_net::udp::UdpConfig::from_env`).
//!
//! | file | what |
//! | --- | --- |
//! | `abi/` | the C structs, with their layout checked at compile time |
//! | `exports.rs` | every exported (name, version) and the function behind it |
//! | `ffi.rs` | errno, and the guard that keeps panics from crossing into C |
//! | `device.rs` | the device list, open and close, the device's sysfs files |
//! | `query.rs` | `ibv_query_device`, `_port`, `_gid`, `_pkey` and their kin |
//! | `pd.rs` | protection and parent domains, memory regions (`ibv_advise_mr` too), address handles |
//! | `rereg.rs` | `ibv_rereg_mr`: rdma-core's input checks, the driver's re-registration, the `ibv_mr` updated |
//! | `dm.rs` | device memory: host memory the library allocates, copies and registers zero-based |
//! | `mw.rs` | memory windows: allocate, bind (type 1 and the type-2 WR), deallocate |
//! | `cq.rs` | completion queues and channels, polling, events |
//! | `cq_ex.rs` | the extended CQ: `ibv_create_cq_ex`, `ibv_start_poll`, `ibv_wc_read_*` |
//! | `qp.rs` | queue pairs and shared receive queues: create, modify, query, destroy |
//! | `qp_ex.rs` | the extended QP: `ibv_create_qp_ex`, `ibv_qp_to_qp_ex`, the `ibv_wr_*` calls |
//! | `post.rs` | posting send and receive chains |
//! | `private.rs` | uroce's own entry points for its librdmacm: a device command as bytes, the CM events' descriptor |
//! | `strings.rs` | the string helpers, rates, fork |
//! | `unsupported.rs` | what uroce does not offer: EOPNOTSUPP, or NULL with errno |

pub mod abi;
mod cq;
mod cq_ex;
mod device;
mod dm;
mod exports;
mod ffi;
mod mw;
mod pd;
mod post;
mod private;
mod qp;
mod qp_ex;
mod query;
mod rereg;
mod strings;
mod unsupported;
