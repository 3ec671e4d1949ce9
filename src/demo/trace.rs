//! The demo's packet lines: the frames of A's capture, decoded.

use super::*;

/// The frames of A's capture not shown yet.
pub(super) struct Trace {
    pub(super) path: Option<PathBuf>,
    pub(super) seen: usize,
}

/// One decoded frame.
pub(super) struct Frame {
    pub(super) src: IpAddr,
    pub(super) dst: IpAddr,
    pub(super) name: &'static str,
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) ack_req: bool,
    pub(super) payload: usize,
    /// Extension headers worth showing (empty for plain data packets).
    pub(super) note: String,
    pub(super) intact: bool,
}

impl Trace {
    /// Decodes the frames captured since the last call.
    pub(super) fn take(&mut self, dev: &uroce_net::udp::UdpDevice) -> Option<Vec<Frame>> {
        let path = self.path.as_ref()?;
        dev.flush_capture().ok()?;
        let bytes = std::fs::read(path).ok()?;
        let reader = CaptureReader::new(&bytes).ok()?;
        let mut frames = Vec::new();
        // A record the writer has not finished yet ends the walk; it is
        // read next time.
        for frame in reader.map_while(Result::ok).skip(self.seen) {
            self.seen += 1;
            let Some(link) = frame.link else { continue };
            let Classified::Roce(roce) = classify(frame.data, link) else { continue };
            let transport = roce.transport();
            if transport.len() < bth::HEADER_LEN {
                continue;
            }
            let b = bth::Packet::new_unchecked(&transport[..bth::HEADER_LEN]);
            let (payload, note) = match roce.packet() {
                Ok(p) => (p.payload().len(), headers_note(&p)),
                Err(e) => (0, format!("MALFORMED: {e}")),
            };
            frames.push(Frame {
                src: roce.ip.source(),
                dst: roce.ip.destination(),
                name: b.opcode().name(),
                qpn: b.dest_qpn().value(),
                psn: b.psn().value(),
                ack_req: b.ack_req(),
                payload,
                note,
                intact: roce.integrity_ok(),
            });
        }
        Some(frames)
    }
}

/// The extension headers a learner wants to see, in a few words.
pub(super) fn headers_note(p: &uroce_wire::roce::Packet<&[u8]>) -> String {
    let mut s = String::new();
    if let Some(h) = p.reth() {
        let _ = write!(s, " RETH va=0x{:x} rkey={} len={}", h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = p.atomic_eth() {
        let _ = write!(
            s,
            " AtomicETH rkey={} cmp=0x{:x} swap/add=0x{:x}",
            h.rkey(),
            h.compare(),
            h.swap_add()
        );
    }
    if let Some(h) = p.deth() {
        let _ = write!(s, " DETH qkey={} src_qp={}", h.qkey(), h.src_qpn());
    }
    if let Some(h) = p.immdt() {
        let _ = write!(s, " ImmDt=0x{:08x}", h.imm());
    }
    if let Some(h) = p.aeth() {
        let _ = write!(s, " AETH {} msn={}", h.syndrome(), h.msn());
    }
    if let Some(h) = p.atomic_ack_eth() {
        let _ = write!(s, " orig=0x{:x}", h.orig());
    }
    s
}

/// The packet lines of a step: runs of data packets with consecutive PSNs
/// share a line.
pub(super) fn wire_lines(frames: &[Frame]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let f = &frames[i];
        let mut j = i + 1;
        while j < frames.len() {
            let g = &frames[j];
            let prev = &frames[j - 1];
            let same = g.src == f.src
                && g.dst == f.dst
                && g.name == f.name
                && g.qpn == f.qpn
                && g.payload == f.payload
                && g.ack_req == f.ack_req
                && g.note.is_empty()
                && f.note.is_empty()
                && g.intact
                && g.psn == (prev.psn + 1) & 0xff_ffff;
            if !same {
                break;
            }
            j += 1;
        }
        let n = j - i;
        let mut line = format!("{} → {}  {}", f.src, f.dst, f.name);
        if n > 1 {
            let _ = write!(line, " ×{n}");
        }
        let _ = write!(line, "  QP 0x{:06x} PSN 0x{:06x}", f.qpn, f.psn);
        if n > 1 {
            let _ = write!(line, "-0x{:06x}", frames[j - 1].psn);
        }
        if f.payload > 0 {
            let _ = write!(line, "  {} B{}", f.payload, if n > 1 { " each" } else { "" });
        }
        if f.ack_req {
            line.push_str("  AckReq");
        }
        line.push_str(&f.note);
        if !f.intact {
            line.push_str("  ICRC BAD");
        }
        lines.push(line);
        i = j;
    }
    lines
}
