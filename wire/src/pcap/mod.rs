//! Reading and writing capture files (pcap and pcapng), with `pcap-file`.
//!
//! [`CaptureReader`] walks the frames of a whole file held in memory and
//! never panics, whatever the bytes: a damaged header is an error from
//! [`CaptureReader::new`], a damaged or cut record ends the walk with an
//! error item. [`PcapSink`] writes Ethernet frames, as uroce's `--capture`
//! will; [`PcapNgSink`] writes them as pcapng, each with an optional
//! comment (Wireshark's `frame.comment`), and [`CaptureWriter`] writes
//! either ([`CaptureFormat`]).

mod read;
mod sinks;
#[cfg(test)]
mod tests;
mod writer;

pub use read::{link_for, CaptureError, CaptureReader, CapturedFrame};
pub use sinks::{PcapNgSink, PcapSink, MAX_COMMENT, SNAPLEN};
pub use writer::{CaptureFormat, CaptureWriter};
