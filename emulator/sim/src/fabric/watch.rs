//! Watching a fabric: a pcap or pcapng capture of its packets, and a
//! mirror port that gets a copy of every frame.

use super::Fabric;
use crate::capture::{node_mac, Capture, CapturePoint};
use crate::NodeId;
use std::io::Write;
use uroce_hca::endpoint::Endpoint;
use uroce_wire::ethernet;
use uroce_wire::pcap::CaptureFormat;

impl<E: Endpoint> Fabric<E> {
    /// Starts a pcap capture (Ethernet link type, nanosecond timestamps in
    /// virtual time) into `writer`, replacing any running one. Capture
    /// errors never change the run; see [`Fabric::capture_error`]. With
    /// ports ([`Fabric::with_ports`]) the capture is pcapng and a frame a
    /// scenario rule fired on carries the firing as its comment.
    pub fn start_capture(&mut self, writer: Box<dyn Write>, point: CapturePoint) {
        self.capture = Some(if self.scenario.is_some() {
            Capture::with_format(writer, point, CaptureFormat::PcapNg)
        } else {
            Capture::new(writer, point)
        });
    }

    /// Frames written to the capture so far.
    pub fn captured_frames(&self) -> u64 {
        self.capture.as_ref().map_or(0, Capture::frames)
    }

    /// The first error writing the capture, if any.
    pub fn capture_error(&self) -> Option<&str> {
        self.capture.as_ref().and_then(Capture::error)
    }

    /// Stops the capture, flushes it and returns the writer; `None` when no
    /// capture runs, `Some(Err)` with the first write error.
    pub fn finish_capture(&mut self) -> Option<Result<Box<dyn Write>, String>> {
        self.capture.take().map(Capture::finish)
    }

    // ----- mirror port -----

    /// Makes `node` a mirror port (a switch's SPAN port), or stops
    /// mirroring with `None`. From then on, every packet the fabric
    /// delivers to another node (duplicates, corrupted copies and the
    /// mirror node's own packets included) is also handed to `node`'s
    /// [`Endpoint::receive`], right after the receiver has taken it, as an
    /// Ethernet II frame: destination MAC [`node_mac`] of the receiver,
    /// source MAC `node_mac` of the sender, then the IP packet. The
    /// mirror node sees the wire, never the receiver's verdict; it reads
    /// whatever it likes of the other endpoints' state by its own means.
    ///
    /// A copy is made synchronously, nothing is queued (the mirror node
    /// keeps what it wants, within its own bounds), and it is not a trace
    /// event of its own: it follows from the delivery, so the trace hash
    /// changes only by what the mirror node does with what it saw.
    /// Counted in [`FabricCounters::mirrored`](super::FabricCounters::mirrored).
    ///
    /// [`node_mac`]: crate::capture::node_mac
    pub fn set_mirror(&mut self, node: Option<NodeId>) {
        if let Some(node) = node {
            self.check_node(node);
        }
        self.mirror = node;
    }

    /// The mirror port, if any.
    pub fn mirror(&self) -> Option<NodeId> {
        self.mirror
    }

    /// Hands a copy of a packet just delivered to the mirror port.
    pub(super) fn mirror_copy(&mut self, from: NodeId, to: NodeId, bytes: &[u8]) {
        let Some(mirror) = self.mirror.filter(|&m| m != to) else { return };
        let mut frame = core::mem::take(&mut self.mirror_frame);
        let header = ethernet::Repr {
            source: node_mac(from),
            destination: node_mac(to),
            ether_type: ethernet::ether_type_of_ip(bytes),
        };
        header.frame_into(bytes, &mut frame);
        self.counters.mirrored += 1;
        self.endpoints[mirror.0].receive(self.now, &frame);
        self.mirror_frame = frame;
    }
}
