//! The real runtime: drives a uroce HCA in real time over the real
//! network, on the process's own memory.
//!
//! * [`udp`]: a device bound to an IP address, RoCEv2 over UDP 4791
//!   through kernel sockets (or, with `UROCE_LINK`/`UROCE_TAP`, as a host
//!   on a link of raw Ethernet frames);
//! * [`link`]: that host: ARP, neighbour discovery and the tools' TCP
//!   (smoltcp) beside the RoCE frames;
//! * [`process_mem`]: host memory that is the process's own, for DMA into
//!   the application's buffers.
//!
//! This crate holds the runtime's `unsafe` (socket calls, the TAP ioctl,
//! raw process memory), each block with its SAFETY note.

pub mod link;
pub mod process_mem;
pub mod remote;
pub mod shm;
pub mod udp;
