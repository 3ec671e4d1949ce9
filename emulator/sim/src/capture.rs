//! pcap capture of a simulated run, readable by tshark, Wireshark and
//! `uroce decode`.
//!
//! Endpoints exchange bare IP packets; the capture wraps each in an
//! Ethernet II header whose addresses are made up from node ids
//! ([`node_mac`]) and stamps it with the virtual time. The writer is
//! `uroce_wire::pcap::CaptureWriter`, the real runtime's too.

use super::NodeId;
use core::time::Duration;
use std::cell::RefCell;
use std::io::{self, Write};
use std::rc::Rc;
use uroce_hca::time::Instant;
use uroce_wire::pcap::{CaptureFormat, CaptureWriter};

/// Which packets go into the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapturePoint {
    /// Each packet as its sender emitted it, at send time (before faults).
    Sent,
    /// Each packet as its receiver gets it, at delivery time (after faults:
    /// duplicates twice, corrupted bits flipped, lost ones missing).
    Delivered,
    /// Both: every delivered packet appears twice.
    Both,
}

impl CapturePoint {
    pub(super) fn sent(self) -> bool {
        matches!(self, CapturePoint::Sent | CapturePoint::Both)
    }

    pub(super) fn delivered(self) -> bool {
        matches!(self, CapturePoint::Delivered | CapturePoint::Both)
    }
}

/// The Ethernet address the capture gives a node: locally administered,
/// unicast, `02:00:` then the node id in 32 bits, big endian.
pub fn node_mac(node: NodeId) -> [u8; 6] {
    let id = u32::try_from(node.0).unwrap_or(u32::MAX).to_be_bytes();
    [0x02, 0x00, id[0], id[1], id[2], id[3]]
}

/// The Ethernet address of the made-up router that packets with no route
/// are sent to.
pub const NO_ROUTE_MAC: [u8; 6] = [0x02, 0xff, 0xff, 0xff, 0xff, 0xff];

/// A pcap file being written (the writer `uroce-net` uses too), and the
/// first error writing it.
pub(super) struct Capture {
    writer: Option<CaptureWriter<Box<dyn Write>>>,
    point: CapturePoint,
    /// The file header could not be written.
    error: Option<String>,
}

impl Capture {
    pub(super) fn new(writer: Box<dyn Write>, point: CapturePoint) -> Capture {
        Capture::with_format(writer, point, CaptureFormat::Pcap)
    }

    /// A capture in `format` (pcapng: frames may carry comments).
    pub(super) fn with_format(
        writer: Box<dyn Write>,
        point: CapturePoint,
        format: CaptureFormat,
    ) -> Capture {
        match CaptureWriter::with_format(writer, format) {
            Ok(writer) => Capture { writer: Some(writer), point, error: None },
            Err(e) => Capture { writer: None, point, error: Some(e.to_string()) },
        }
    }

    pub(super) fn point(&self) -> CapturePoint {
        self.point
    }

    /// Writes one IP packet. After the first error the capture stops (the
    /// run goes on: a capture never changes what the fabric does).
    pub(super) fn write(&mut self, at: Instant, from: NodeId, to: Option<NodeId>, packet: &[u8]) {
        self.write_commented(at, from, to, packet, None);
    }

    /// [`Capture::write`] with a comment on the frame (pcapng only; a
    /// classic pcap drops it).
    pub(super) fn write_commented(
        &mut self,
        at: Instant,
        from: NodeId,
        to: Option<NodeId>,
        packet: &[u8],
        comment: Option<&str>,
    ) {
        let Some(writer) = self.writer.as_mut() else { return };
        let timestamp = Duration::from_nanos(at.as_nanos());
        let _ = writer.write_packet_commented(
            timestamp,
            to.map_or(NO_ROUTE_MAC, node_mac),
            node_mac(from),
            packet,
            comment,
        );
    }

    pub(super) fn frames(&self) -> u64 {
        self.writer.as_ref().map_or(0, CaptureWriter::frames)
    }

    pub(super) fn error(&self) -> Option<&str> {
        self.error.as_deref().or_else(|| self.writer.as_ref().and_then(CaptureWriter::error))
    }

    /// Flushes and returns the writer (or the first error).
    pub(super) fn finish(self) -> Result<Box<dyn Write>, String> {
        match (self.error, self.writer) {
            (Some(error), _) => Err(error),
            (None, Some(writer)) => writer.finish(),
            (None, None) => Err("capture already closed".into()),
        }
    }
}

impl core::fmt::Debug for Capture {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Capture")
            .field("point", &self.point)
            .field("frames", &self.frames())
            .field("error", &self.error)
            .finish()
    }
}

/// An in-memory writer that stays readable after it is handed to the
/// fabric: clones share one buffer (single thread only).
#[derive(Debug, Clone, Default)]
pub struct SharedBuffer(Rc<RefCell<Vec<u8>>>);

impl SharedBuffer {
    /// An empty buffer.
    pub fn new() -> SharedBuffer {
        SharedBuffer::default()
    }

    /// A copy of what was written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }
}

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_from_node_ids() {
        assert_eq!(node_mac(NodeId(0)), [2, 0, 0, 0, 0, 0]);
        assert_eq!(node_mac(NodeId(0x0102_0304)), [2, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn frames_get_an_ethernet_header() {
        let buf = SharedBuffer::new();
        let mut c = Capture::new(Box::new(buf.clone()), CapturePoint::Both);
        c.write(Instant::from_nanos(1_500), NodeId(1), Some(NodeId(2)), &[0x45, 0, 0, 20]);
        c.write(Instant::from_nanos(2_000), NodeId(1), None, &[0x60]);
        assert_eq!(c.frames(), 2);
        assert!(c.finish().is_ok());
        let bytes = buf.bytes();
        let frames: Vec<_> = uroce_wire::pcap::CaptureReader::new(&bytes)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].timestamp, Duration::from_nanos(1_500));
        assert_eq!(&frames[0].data[..12], &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        assert_eq!(&frames[0].data[12..], &[0x08, 0x00, 0x45, 0, 0, 20]);
        assert_eq!(&frames[1].data[..6], &NO_ROUTE_MAC);
        assert_eq!(&frames[1].data[12..14], &[0x86, 0xdd]);
    }

    #[test]
    fn write_errors_stop_the_capture() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut c = Capture::new(Box::new(Broken), CapturePoint::Sent);
        c.write(Instant::ZERO, NodeId(0), Some(NodeId(1)), &[0x45]);
        assert!(c.error().is_some());
        assert_eq!(c.frames(), 0);
        assert!(c.finish().is_err());
    }
}
