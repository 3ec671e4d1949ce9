//! `uroce decode`: a RoCEv2 capture, one line per frame.
//!
//! A frame is RoCEv2 when it is a UDP datagram to port 4791 (as Wireshark
//! decides). Each such frame is checked the way a receiving NIC would:
//! the transport headers against the opcode table, the ICRC, and the IPv4
//! header checksum and UDP checksum, which the ICRC leaves out. The `icrc`
//! verdict is `ok` only when all three hold.
//!
//! A frame's comment (pcapng's `opt_comment`: what a fault did to it)
//! follows its line: `        comment: ...` in text, `# comment N: ...`
//! in TSV (where `#` lines are not frames).

mod mad;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use uroce_wire::deth::GSI_QKEY;
use uroce_wire::frame::{classify, Classified, RoceFrame};
use uroce_wire::opcode::Mask;
use uroce_wire::pcap::{CaptureError, CaptureReader, CapturedFrame};
use uroce_wire::{bth, roce, Opcode};

/// How to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a person: every header, problems spelled out.
    Text,
    /// For a program: one tab-separated line per RoCEv2 frame.
    Tsv,
}

/// The tallies printed at the end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames in the file.
    pub frames: usize,
    /// RoCEv2 frames among them.
    pub roce: usize,
    /// RoCEv2 frames whose ICRC (and IPv4/UDP checksums) verify.
    pub icrc_ok: usize,
    /// RoCEv2 frames that fail it (or are too damaged to check).
    pub icrc_bad: usize,
    /// RoCEv2 frames whose headers do not fit the opcode table or the
    /// IP/UDP lengths.
    pub malformed: usize,
    /// RoCEv2 frames per opcode name.
    pub opcodes: BTreeMap<&'static str, usize>,
}

impl Summary {
    /// Whether every RoCEv2 frame was well formed with a good ICRC.
    pub fn clean(&self) -> bool {
        self.icrc_bad == 0 && self.malformed == 0
    }
}

/// Decodes the file at `path`; returns the exit status (0 clean, 1 a bad
/// or malformed RoCEv2 frame, 2 the file cannot be read).
pub fn run(path: &Path, format: Format, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = writeln!(err, "uroce decode: {}: {e}", path.display());
            return 2;
        }
    };
    match decode_bytes(&bytes, format, out) {
        Ok((summary, None)) => i32::from(!summary.clean()),
        Ok((_, Some(cut))) => {
            let _ = writeln!(err, "uroce decode: {}: {cut}", path.display());
            2
        }
        Err(e) => {
            let _ = writeln!(err, "uroce decode: {}: {e}", path.display());
            2
        }
    }
}

/// Decodes a capture held in memory. Returns the summary and, when the
/// file ends inside a record, what went wrong there (frames before it are
/// printed). Output errors (a closed pipe) end the walk quietly.
pub fn decode_bytes(
    bytes: &[u8],
    format: Format,
    out: &mut dyn Write,
) -> Result<(Summary, Option<CaptureError>), CaptureError> {
    let reader = CaptureReader::new(bytes)?;
    let mut summary = Summary::default();
    let mut first_ts = None;
    let mut cut = None;
    let mut line = String::new();
    for item in reader {
        let frame = match item {
            Ok(frame) => frame,
            Err(e) => {
                cut = Some(e);
                break;
            }
        };
        summary.frames += 1;
        let start = *first_ts.get_or_insert(frame.timestamp);
        line.clear();
        describe_frame(
            &frame,
            frame.timestamp.saturating_sub(start),
            format,
            &mut summary,
            &mut line,
        );
        if let Some(comment) = frame.comment {
            comment_line(frame.number, comment, format, &mut line);
        }
        if !line.is_empty() && out.write_all(line.as_bytes()).is_err() {
            return Ok((summary, cut));
        }
    }
    let s = &summary;
    let tally = format!(
        "frames={} roce={} icrc_ok={} icrc_bad={} malformed={}",
        s.frames, s.roce, s.icrc_ok, s.icrc_bad, s.malformed
    );
    let _ = match format {
        Format::Tsv => writeln!(out, "# {tally}"),
        Format::Text => {
            let census: Vec<String> = s.opcodes.iter().map(|(n, c)| format!("{n}={c}")).collect();
            writeln!(out, "\nsummary: {tally}\nopcodes: {}", census.join(" "))
        }
    };
    Ok((summary, cut))
}

/// A frame's comment, on a line of its own: a line break or tab in it is
/// written as `\n`, `\t` (one line per comment, whatever it holds).
fn comment_line(number: usize, comment: &str, format: Format, line: &mut String) {
    let escaped = comment
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t");
    let _ = match format {
        Format::Text => writeln!(line, "        comment: {escaped}"),
        Format::Tsv => writeln!(line, "# comment {number}: {escaped}"),
    };
}

fn describe_frame(
    frame: &CapturedFrame<'_>,
    rel_time: std::time::Duration,
    format: Format,
    summary: &mut Summary,
    line: &mut String,
) {
    let number = frame.number;
    let Some(link) = frame.link else {
        if format == Format::Text {
            let _ =
                writeln!(line, "{number:>6}  (not RoCE) link type {} not read", frame.link_type);
        }
        return;
    };
    let roce = match classify(frame.data, link) {
        Classified::Roce(roce) => roce,
        Classified::Other(other) => {
            if format == Format::Text {
                let _ = writeln!(line, "{number:>6}  (not RoCE) {other}");
            }
            return;
        }
    };
    summary.roce += 1;
    let intact = roce.integrity_ok();
    if intact {
        summary.icrc_ok += 1;
    } else {
        summary.icrc_bad += 1;
    }
    let packet = roce.packet();
    if packet.is_err() {
        summary.malformed += 1;
    }
    let bth = (roce.transport().len() >= bth::HEADER_LEN)
        .then(|| bth::Packet::new_unchecked(&roce.transport()[..bth::HEADER_LEN]));
    let opcode = bth.map(|b| b.opcode());
    let name = opcode.map_or("-", Opcode::name);
    *summary.opcodes.entry(name).or_default() += 1;
    match format {
        Format::Tsv => tsv_line(number, &roce, bth, packet.as_ref().ok(), intact, line),
        Format::Text => {
            let time = rel_time.as_secs_f64();
            text_line(number, time, &roce, bth, &packet, intact, line);
        }
    }
}

fn tsv_line(
    number: usize,
    roce: &RoceFrame<'_>,
    bth: Option<bth::Packet<&[u8]>>,
    packet: Option<&roce::Packet<&[u8]>>,
    intact: bool,
    line: &mut String,
) {
    let (src, dst) = (roce.ip.source(), roce.ip.destination());
    let _ = write!(line, "{number}\t{src}\t{dst}\t");
    match bth {
        Some(b) => {
            let op = b.opcode();
            let _ = write!(
                line,
                "0x{:02x}\t{}\t0x{:06x}\t{}\t{}\t",
                op.0,
                op.name(),
                b.dest_qpn().value(),
                b.psn().value(),
                u8::from(b.ack_req())
            );
        }
        None => line.push_str("-\t-\t-\t-\t-\t"),
    }
    match packet {
        Some(p) => {
            let _ = write!(line, "{}", p.payload().len());
        }
        None => line.push('-'),
    }
    let _ = writeln!(line, "\t{}", if intact { "ok" } else { "bad" });
}

fn text_line(
    number: usize,
    time: f64,
    roce: &RoceFrame<'_>,
    bth: Option<bth::Packet<&[u8]>>,
    packet: &uroce_wire::Result<roce::Packet<&[u8]>>,
    intact: bool,
    line: &mut String,
) {
    let (src, dst) = (roce.ip.source(), roce.ip.destination());
    let _ = write!(line, "{number:>6} {time:>11.6}  {src} -> {dst}  ");
    match bth {
        Some(b) => {
            let _ = write!(
                line,
                "{:<34} QP={} PSN={} A={}",
                b.opcode().name(),
                b.dest_qpn(),
                b.psn(),
                u8::from(b.ack_req())
            );
            if b.solicited() {
                line.push_str(" SE=1");
            }
            if b.fecn() || b.becn() {
                let _ = write!(line, " FECN={} BECN={}", u8::from(b.fecn()), u8::from(b.becn()));
            }
        }
        None => line.push_str("(no room for a BTH)"),
    }
    match packet {
        Ok(p) => {
            describe_ext_headers(p, line);
            if p.info().is(Mask::PAYLOAD) {
                let _ = write!(line, " len={}", p.payload().len());
            }
            let to_gsi = p.deth().is_some_and(|d| d.qkey() == GSI_QKEY)
                && bth.is_some_and(|b| b.dest_qpn().value() == 1);
            if to_gsi && p.payload().len() == uroce_wire::mad::MAD_LEN {
                mad::describe(p.payload(), line);
            }
        }
        Err(e) => {
            let _ = write!(line, "  MALFORMED: {e}");
        }
    }
    if intact {
        line.push_str("  icrc=ok");
    } else {
        line.push_str("  icrc=BAD");
        match (roce.stored_icrc(), roce.computed_icrc()) {
            (Some(stored), Some(computed)) if stored != computed => {
                let _ = write!(line, " (stored {stored:08x}, computed {computed:08x})");
            }
            (_, None) => line.push_str(" (cannot compute)"),
            _ => {}
        }
        if !roce.ip_checksum_ok() {
            line.push_str(" (IPv4 header checksum wrong)");
        }
        if !roce.udp_checksum_ok() {
            line.push_str(" (UDP checksum wrong)");
        }
    }
    line.push('\n');
}

fn describe_ext_headers(p: &roce::Packet<&[u8]>, line: &mut String) {
    if let Some(h) = p.rdeth() {
        let _ = write!(line, " RDETH[eecn=0x{:06x}]", h.eecn());
    }
    if let Some(h) = p.deth() {
        let _ = write!(line, " DETH[qkey={} src_qp={}]", h.qkey(), h.src_qpn());
    }
    if let Some(h) = p.feth() {
        let _ = write!(line, " FETH[sel={} plt={}]", h.selectivity_level(), h.placement_type());
    }
    if let Some(h) = p.reth() {
        let _ = write!(line, " RETH[va=0x{:x} rkey={} dma_len={}]", h.va(), h.rkey(), h.dma_len());
    }
    if let Some(h) = p.atomic_eth() {
        let _ = write!(
            line,
            " AtomicETH[va=0x{:x} rkey={} swap_add=0x{:x} compare=0x{:x}]",
            h.va(),
            h.rkey(),
            h.swap_add(),
            h.compare()
        );
    }
    if let Some(h) = p.aeth() {
        let _ = write!(line, " AETH[{} msn={}]", h.syndrome(), h.msn());
    }
    if let Some(h) = p.atomic_ack_eth() {
        let _ = write!(line, " AtomicAckETH[orig=0x{:x}]", h.orig());
    }
    if let Some(h) = p.immdt() {
        let _ = write!(line, " ImmDt[0x{:08x}]", h.imm());
    }
    if let Some(h) = p.ieth() {
        let _ = write!(line, " IETH[rkey={}]", h.rkey());
    }
}
