//! A device in another process: the driver's [`RemoteDevice`] (a
//! `DeviceLink` over a Unix socket) and the device's [`serve`], with the
//! rings, doorbell records and buffers in shared memory both map
//! ([`crate::shm`]). The protocol: [`protocol`].
//!
//! This is the seam's proof that the driver is written against the device
//! interface and nothing else: the same verbs code posts WQEs that an HCA
//! in another process executes from the shared rings.

mod client;
pub mod protocol;
mod server;

pub use client::{RemoteDevice, RemoteError};
pub use server::{serve, serve_one, ServeConfig, ServeError};
