//! Reading and writing capture files (pcap and pcapng), with `pcap-file`.
//!
//! [`CaptureReader`] walks the frames of a whole file held in memory and
//! never panics, whatever the bytes: a damaged header is an error from
//! [`CaptureReader::new`], a damaged or cut record ends the walk with an
//! error item. [`PcapSink`] writes Ethernet frames, as uroce's `--capture`
//! will; [`PcapNgSink`] writes them as pcapng, each with an optional
//! comment (Wireshark's `frame.comment`), and [`CaptureWriter`] writes
//! either ([`CaptureFormat`]).

use crate::ethernet;
use crate::frame::Link;
use core::time::Duration;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgParser, PcapNgWriter};
use pcap_file::{DataLink, PcapError, TsResolution};
use std::borrow::Cow;
use std::io::{self, Write};

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame<'a> {
    /// 1-based position in the file.
    pub number: usize,
    /// Capture time since the Unix epoch (as the file states it).
    pub timestamp: Duration,
    /// How to read the frame, or `None` for a link type uroce cannot read.
    pub link: Option<Link>,
    /// The file's link type number.
    pub link_type: u32,
    /// The captured bytes (may be shorter than the frame was).
    pub data: &'a [u8],
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// The frame's comment (pcapng's `opt_comment`; the first, if several),
    /// as Wireshark shows in `frame.comment`. Classic pcap has none.
    pub comment: Option<&'a str>,
}

/// Why a capture file could not be read (all of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureError {
    /// Not a pcap or pcapng file (bad magic or header).
    NotACapture(String),
    /// The file ends in the middle of a record.
    Truncated {
        /// Frames read before the cut.
        after_frame: usize,
    },
    /// A record is damaged.
    BadRecord {
        /// Frames read before the damaged record.
        after_frame: usize,
        /// What is wrong.
        reason: String,
    },
}

impl core::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CaptureError::NotACapture(why) => write!(f, "not a pcap or pcapng file ({why})"),
            CaptureError::Truncated { after_frame } => {
                write!(f, "file cut short in the middle of a record after frame {after_frame}")
            }
            CaptureError::BadRecord { after_frame, reason } => {
                write!(f, "damaged record after frame {after_frame}: {reason}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// The link type a pcap header names, as uroce reads it.
pub fn link_for(link_type: u32) -> Option<Link> {
    match DataLink::from(link_type) {
        DataLink::ETHERNET => Some(Link::Ethernet),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(Link::RawIp),
        DataLink::LINUX_SLL => Some(Link::LinuxSll),
        DataLink::LINUX_SLL2 => Some(Link::LinuxSll2),
        DataLink::NULL | DataLink::LOOP => Some(Link::Null),
        _ => None,
    }
}

enum Format {
    Pcap(PcapParser),
    PcapNg(Box<PcapNgParser>),
}

/// Walks the frames of a capture file held in memory.
pub struct CaptureReader<'a> {
    format: Format,
    rest: &'a [u8],
    frames: usize,
    done: bool,
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

impl<'a> CaptureReader<'a> {
    /// Reads the file header.
    pub fn new(bytes: &'a [u8]) -> Result<CaptureReader<'a>, CaptureError> {
        let not_a_capture = |e: PcapError| CaptureError::NotACapture(e.to_string());
        let (rest, format) = if bytes.starts_with(&PCAPNG_MAGIC) {
            let (rest, parser) = PcapNgParser::new(bytes).map_err(not_a_capture)?;
            (rest, Format::PcapNg(Box::new(parser)))
        } else {
            let (rest, parser) = PcapParser::new(bytes).map_err(not_a_capture)?;
            (rest, Format::Pcap(parser))
        };
        Ok(CaptureReader { format, rest, frames: 0, done: false })
    }

    /// The link type of a classic pcap file (pcapng states it per interface).
    pub fn pcap_link_type(&self) -> Option<u32> {
        match &self.format {
            Format::Pcap(parser) => Some(u32::from(parser.header().datalink)),
            Format::PcapNg(_) => None,
        }
    }

    fn fail(&mut self, error: PcapError) -> CaptureError {
        self.done = true;
        match error {
            PcapError::IncompleteBuffer => CaptureError::Truncated { after_frame: self.frames },
            other => {
                CaptureError::BadRecord { after_frame: self.frames, reason: other.to_string() }
            }
        }
    }

    fn next_pcap(&mut self) -> Option<Result<CapturedFrame<'a>, CaptureError>> {
        let Format::Pcap(parser) = &self.format else { return None };
        let header = parser.header();
        match parser.next_raw_packet(self.rest) {
            Ok((rest, raw)) => {
                self.rest = rest;
                let frac_ns = match header.ts_resolution {
                    TsResolution::MicroSecond => u64::from(raw.ts_frac) * 1_000,
                    TsResolution::NanoSecond => u64::from(raw.ts_frac),
                };
                let timestamp =
                    Duration::from_secs(u64::from(raw.ts_sec)) + Duration::from_nanos(frac_ns);
                let data: &'a [u8] = match raw.data {
                    std::borrow::Cow::Borrowed(d) => d,
                    std::borrow::Cow::Owned(_) => unreachable!("the parser borrows"),
                };
                let link_type = u32::from(header.datalink);
                self.frames += 1;
                Some(Ok(CapturedFrame {
                    number: self.frames,
                    timestamp,
                    link: link_for(link_type),
                    link_type,
                    data,
                    orig_len: raw.orig_len,
                    comment: None,
                }))
            }
            Err(e) => Some(Err(self.fail(e))),
        }
    }

    fn next_pcapng(&mut self) -> Option<Result<CapturedFrame<'a>, CaptureError>> {
        loop {
            let Format::PcapNg(parser) = &mut self.format else { return None };
            let (rest, block) = match parser.next_block(self.rest) {
                Ok(parsed) => parsed,
                Err(e) => return Some(Err(self.fail(e))),
            };
            self.rest = rest;
            let (interface_id, raw_ts, orig_len, data, comment) = match block {
                Block::EnhancedPacket(p) => {
                    let comment = p.options.into_iter().find_map(|o| match o {
                        EnhancedPacketOption::Comment(Cow::Borrowed(c)) => Some(c),
                        _ => None,
                    });
                    (p.interface_id, Some(p.timestamp), p.original_len, p.data, comment)
                }
                Block::SimplePacket(p) => (0, None, p.original_len, p.data, None),
                // The obsolete Packet block: its timestamp as the EPB's.
                Block::Packet(p) => (
                    u32::from(p.interface_id),
                    Some(Duration::from_nanos(p.timestamp)),
                    p.original_len,
                    p.data,
                    None,
                ),
                _ => continue,
            };
            let interface = parser.interfaces().get(interface_id as usize);
            let link_type = interface.map(|i| u32::from(i.linktype));
            // `pcap-file` hands the raw timestamp over as nanoseconds,
            // whatever unit the interface counts in.
            let timestamp = raw_ts.map_or(Duration::ZERO, |raw| {
                scale_timestamp(raw.as_nanos(), interface.map_or(6, ts_resolution))
            });
            let data: &'a [u8] = match data {
                std::borrow::Cow::Borrowed(d) => d,
                std::borrow::Cow::Owned(_) => unreachable!("the parser borrows"),
            };
            self.frames += 1;
            return Some(Ok(CapturedFrame {
                number: self.frames,
                timestamp,
                link: link_type.and_then(link_for),
                link_type: link_type.unwrap_or(u32::MAX),
                data,
                orig_len,
                comment,
            }));
        }
    }
}

/// An interface's `if_tsresol` (6, microseconds, when it states none).
fn ts_resolution(interface: &InterfaceDescriptionBlock<'_>) -> u8 {
    interface
        .options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
            _ => None,
        })
        .unwrap_or(6)
}

/// A pcapng timestamp of `raw` units of `if_tsresol` `resolution` (bit 7
/// clear: 10^-n s; set: 2^-n s) as a time since the epoch; saturates.
fn scale_timestamp(raw: u128, resolution: u8) -> Duration {
    let n = u32::from(resolution & 0x7f);
    let units_per_sec =
        if resolution & 0x80 == 0 { 10u128.checked_pow(n) } else { 1u128.checked_shl(n) };
    // A resolution no timestamp fits in (beyond 10^-38 or 2^-127 s).
    let Some(units_per_sec) = units_per_sec else { return Duration::ZERO };
    let secs = raw / units_per_sec;
    // Saturates only for units finer than 10^-29 s, which no capture uses.
    let frac_ns =
        ((raw % units_per_sec).saturating_mul(1_000_000_000) / units_per_sec).min(999_999_999);
    match u64::try_from(secs) {
        Ok(secs) => Duration::new(secs, frac_ns as u32),
        Err(_) => Duration::MAX,
    }
}

impl<'a> Iterator for CaptureReader<'a> {
    type Item = Result<CapturedFrame<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        match self.format {
            Format::Pcap(_) => self.next_pcap(),
            Format::PcapNg(_) => self.next_pcapng(),
        }
    }
}

/// Writes Ethernet frames to a classic pcap file (nanosecond timestamps),
/// which tshark and Wireshark open as RoCEv2 on UDP port 4791.
pub struct PcapSink<W: Write> {
    writer: PcapWriter<W>,
}

/// The snapshot length uroce writes: whole jumbo frames.
pub const SNAPLEN: u32 = 262_144;

impl<W: Write> PcapSink<W> {
    /// Writes the file header. An error is the writer's own (`pcap-file`
    /// would call any of them "Error reading bytes").
    pub fn new(writer: W) -> io::Result<PcapSink<W>> {
        let header = PcapHeader {
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(writer, header).map_err(write_error)?;
        Ok(PcapSink { writer })
    }

    /// Writes one frame captured at `timestamp`.
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> io::Result<()> {
        let len = frame_len(frame)?;
        self.writer.write_packet(&PcapPacket::new(timestamp, len, frame)).map_err(write_error)?;
        Ok(())
    }

    /// Returns the writer.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

/// Writes Ethernet frames to a pcapng file, each with an optional comment
/// (`opt_comment`, Wireshark's `frame.comment`): a section header, one
/// interface (Ethernet, [`SNAPLEN`], nanosecond timestamps) and an
/// enhanced packet block per frame.
pub struct PcapNgSink<W: Write> {
    writer: PcapNgWriter<W>,
}

/// The longest comment written: an option's length is 16 bits (longer
/// ones are cut at a character boundary).
pub const MAX_COMMENT: usize = u16::MAX as usize - 3;

impl<W: Write> PcapNgSink<W> {
    /// Writes the section header and the interface's description.
    pub fn new(writer: W) -> io::Result<PcapNgSink<W>> {
        let mut writer = PcapNgWriter::new(writer).map_err(write_error)?;
        // `pcap-file` writes an EPB's timestamp as whole nanoseconds: the
        // interface must say so (if_tsresol 9), or readers, which assume
        // microseconds, would be 1000 times off.
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        };
        writer.write_pcapng_block(interface).map_err(write_error)?;
        Ok(PcapNgSink { writer })
    }

    /// Writes one frame captured at `timestamp`, with `comment` if any.
    pub fn write_frame(
        &mut self,
        timestamp: Duration,
        frame: &[u8],
        comment: Option<&str>,
    ) -> io::Result<()> {
        let original_len = frame_len(frame)?;
        let options = match comment {
            Some(comment) => {
                vec![EnhancedPacketOption::Comment(Cow::Borrowed(cut_comment(comment)))]
            }
            None => Vec::new(),
        };
        let packet = EnhancedPacketBlock {
            interface_id: 0,
            timestamp,
            original_len,
            data: Cow::Borrowed(frame),
            options,
        };
        self.writer.write_pcapng_block(packet).map_err(write_error)?;
        Ok(())
    }

    /// Returns the writer.
    pub fn into_inner(self) -> W {
        self.writer.into_inner()
    }
}

/// `comment`, cut to at most [`MAX_COMMENT`] bytes at a character boundary.
fn cut_comment(comment: &str) -> &str {
    if comment.len() <= MAX_COMMENT {
        return comment;
    }
    let mut end = MAX_COMMENT;
    while !comment.is_char_boundary(end) {
        end -= 1;
    }
    &comment[..end]
}

/// A frame's length as a capture record states it.
fn frame_len(frame: &[u8]) -> io::Result<u32> {
    u32::try_from(frame.len()).map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidInput, "frame longer than u32::MAX bytes")
    })
}

/// The file format a [`CaptureWriter`] writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap with nanosecond timestamps (the default): comments
    /// are dropped.
    #[default]
    Pcap,
    /// pcapng, where a frame may carry a comment.
    PcapNg,
}

/// Either sink.
enum Sink<W: Write> {
    Pcap(PcapSink<W>),
    PcapNg(PcapNgSink<W>),
}

impl<W: Write> Sink<W> {
    fn write_frame(
        &mut self,
        timestamp: Duration,
        frame: &[u8],
        comment: Option<&str>,
    ) -> io::Result<()> {
        match self {
            Sink::Pcap(sink) => sink.write_frame(timestamp, frame),
            Sink::PcapNg(sink) => sink.write_frame(timestamp, frame, comment),
        }
    }

    fn into_inner(self) -> W {
        match self {
            Sink::Pcap(sink) => sink.into_inner(),
            Sink::PcapNg(sink) => sink.into_inner(),
        }
    }
}

/// A capture being written, as the simulated fabric and the real runtime
/// both write one: bare IP packets wrapped in an Ethernet header whose
/// MACs the caller names ([`CaptureWriter::write_packet`]), or whole
/// frames ([`CaptureWriter::write_frame`]). It counts what it wrote and
/// keeps the first error; after it, nothing more is written (a capture cut
/// short in the middle of a record would not read), and every write
/// reports that the capture stopped. A capture never stops what it
/// watches: callers count the errors and go on.
///
/// Classic pcap unless made [`CaptureWriter::with_format`] pcapng, where
/// [`CaptureWriter::write_packet_commented`] annotates a frame.
pub struct CaptureWriter<W: Write> {
    sink: Option<Sink<W>>,
    format: CaptureFormat,
    frame: Vec<u8>,
    frames: u64,
    error: Option<String>,
}

impl<W: Write> CaptureWriter<W> {
    /// Writes a classic pcap file's header (an error is the writer's own).
    pub fn new(writer: W) -> io::Result<CaptureWriter<W>> {
        CaptureWriter::with_format(writer, CaptureFormat::Pcap)
    }

    /// Writes the file header of `format` (an error is the writer's own).
    pub fn with_format(writer: W, format: CaptureFormat) -> io::Result<CaptureWriter<W>> {
        let sink = match format {
            CaptureFormat::Pcap => Sink::Pcap(PcapSink::new(writer)?),
            CaptureFormat::PcapNg => Sink::PcapNg(PcapNgSink::new(writer)?),
        };
        Ok(CaptureWriter { sink: Some(sink), format, frame: Vec::new(), frames: 0, error: None })
    }

    /// Writes an IP packet behind an Ethernet header from `source_mac` to
    /// `destination_mac` (the EtherType from the IP version).
    pub fn write_packet(
        &mut self,
        timestamp: Duration,
        destination_mac: [u8; 6],
        source_mac: [u8; 6],
        packet: &[u8],
    ) -> io::Result<()> {
        self.write_packet_commented(timestamp, destination_mac, source_mac, packet, None)
    }

    /// [`CaptureWriter::write_packet`] with a comment on the frame (kept
    /// in pcapng, dropped in classic pcap).
    pub fn write_packet_commented(
        &mut self,
        timestamp: Duration,
        destination_mac: [u8; 6],
        source_mac: [u8; 6],
        packet: &[u8],
        comment: Option<&str>,
    ) -> io::Result<()> {
        let header = ethernet::Repr {
            source: source_mac,
            destination: destination_mac,
            ether_type: ethernet::ether_type_of_ip(packet),
        };
        let mut frame = core::mem::take(&mut self.frame);
        header.frame_into(packet, &mut frame);
        let result = self.write_frame_commented(timestamp, &frame, comment);
        self.frame = frame;
        result
    }

    /// Writes a whole frame as it is.
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> io::Result<()> {
        self.write_frame_commented(timestamp, frame, None)
    }

    /// [`CaptureWriter::write_frame`] with a comment on the frame (kept in
    /// pcapng, dropped in classic pcap).
    pub fn write_frame_commented(
        &mut self,
        timestamp: Duration,
        frame: &[u8],
        comment: Option<&str>,
    ) -> io::Result<()> {
        let Some(sink) = self.sink.as_mut() else {
            return Err(io::Error::other("the capture stopped after an earlier write error"));
        };
        match sink.write_frame(timestamp, frame, comment) {
            Ok(()) => {
                self.frames += 1;
                Ok(())
            }
            Err(e) => {
                self.error = Some(e.to_string());
                self.sink = None;
                Err(e)
            }
        }
    }

    /// The format being written.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Flushes and returns the writer, or the first error.
    pub fn finish(self) -> Result<W, String> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let Some(sink) = self.sink else { return Err("capture already closed".into()) };
        let mut writer = sink.into_inner();
        writer.flush().map_err(|e| e.to_string())?;
        Ok(writer)
    }
}

impl<W: Write> core::fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("format", &self.format)
            .field("frames", &self.frames)
            .field("error", &self.error)
            .finish()
    }
}

/// The I/O error under a `pcap-file` error writing a capture.
fn write_error(error: PcapError) -> io::Error {
    match error {
        PcapError::IoError(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that is always full, as `/dev/full`.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_error_is_the_writers_own() {
        let Err(e) = PcapSink::new(Full) else { panic!("a header written to a full writer") };
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
        assert!(!e.to_string().contains("reading"), "{e}");
    }

    #[test]
    fn write_then_read_back() {
        let mut sink = PcapSink::new(Vec::new()).unwrap();
        sink.write_frame(Duration::new(5, 7), &[1, 2, 3]).unwrap();
        sink.write_frame(Duration::new(6, 0), &[4; 100]).unwrap();
        let bytes = sink.into_inner();
        let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().collect();
        assert_eq!(frames.len(), 2);
        let first = frames[0].as_ref().unwrap();
        assert_eq!(first.number, 1);
        assert_eq!(first.timestamp, Duration::new(5, 7));
        assert_eq!(first.data, &[1, 2, 3]);
        assert_eq!(first.link, Some(Link::Ethernet));
        assert_eq!(frames[1].as_ref().unwrap().data.len(), 100);
    }

    #[test]
    fn cut_file_reports_truncation_after_the_last_whole_frame() {
        let mut sink = PcapSink::new(Vec::new()).unwrap();
        sink.write_frame(Duration::ZERO, &[1; 40]).unwrap();
        sink.write_frame(Duration::ZERO, &[2; 40]).unwrap();
        let bytes = sink.into_inner();
        let cut = &bytes[..bytes.len() - 10];
        let items: Vec<_> = CaptureReader::new(cut).unwrap().collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert_eq!(items[1], Err(CaptureError::Truncated { after_frame: 1 }));
    }

    #[test]
    fn packets_get_an_ethernet_header_and_errors_stop_the_capture() {
        let mut capture = CaptureWriter::new(Vec::new()).unwrap();
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        capture.write_packet(Duration::new(1, 0), b, a, &[0x45, 0, 0, 20]).unwrap();
        capture.write_packet(Duration::new(2, 0), a, b, &[0x60]).unwrap();
        capture.write_frame(Duration::new(3, 0), &[9; 20]).unwrap();
        assert_eq!(capture.frames(), 3);
        let bytes = capture.finish().unwrap();
        let frames: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
        assert_eq!(frames[0].data, &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 0x45, 0, 0, 20]);
        assert_eq!(&frames[1].data[12..], &[0x86, 0xdd, 0x60]);
        assert_eq!(frames[2].data, &[9; 20]);

        /// Takes this many bytes (the file header's 24), then fails.
        struct FullAfterHeader(usize);
        impl Write for FullAfterHeader {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if self.0 < buf.len() {
                    return Err(io::Error::from_raw_os_error(28));
                }
                self.0 -= buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut capture = CaptureWriter::new(FullAfterHeader(24)).unwrap();
        let e = capture.write_frame(Duration::ZERO, &[1; 20]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert!(capture.error().is_some());
        assert!(capture.write_frame(Duration::ZERO, &[1; 20]).is_err(), "stopped");
        assert_eq!(capture.frames(), 0);
        assert!(capture.finish().is_err());
    }

    #[test]
    fn pcapng_frames_carry_their_comments_and_nanosecond_timestamps() {
        let mut capture = CaptureWriter::with_format(Vec::new(), CaptureFormat::PcapNg).unwrap();
        assert_eq!(capture.format(), CaptureFormat::PcapNg);
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let t0 = Duration::new(1_700_000_000, 123_456_789);
        capture
            .write_packet_commented(t0, b, a, &[0x45, 0, 0, 20], Some("uroce scenario: rule cut"))
            .unwrap();
        capture.write_frame(t0 + Duration::from_nanos(1), &[9; 21]).unwrap();
        capture.write_frame_commented(Duration::new(2, 0), &[7; 3], Some("DROPPED ü")).unwrap();
        assert_eq!(capture.frames(), 3);
        let bytes = capture.finish().unwrap();
        assert_eq!(&bytes[..4], &PCAPNG_MAGIC);
        let reader = CaptureReader::new(&bytes).unwrap();
        assert_eq!(reader.pcap_link_type(), None);
        let frames: Vec<_> = reader.map(Result::unwrap).collect();
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].comment, Some("uroce scenario: rule cut"));
        assert_eq!(frames[0].timestamp, t0, "if_tsresol 9: read back to the nanosecond");
        assert_eq!(frames[0].link, Some(Link::Ethernet));
        assert_eq!(frames[0].data, &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 0x45, 0, 0, 20]);
        assert_eq!((frames[1].comment, frames[1].data.len()), (None, 21));
        assert_eq!(frames[1].timestamp, t0 + Duration::from_nanos(1));
        assert_eq!(frames[2].comment, Some("DROPPED ü"));
        assert_eq!(frames[2].orig_len, 3);
    }

    #[test]
    fn classic_pcap_drops_comments_and_stays_the_default() {
        let mut capture = CaptureWriter::new(Vec::new()).unwrap();
        assert_eq!(capture.format(), CaptureFormat::Pcap);
        capture.write_frame_commented(Duration::new(1, 5), &[1; 14], Some("lost")).unwrap();
        let bytes = capture.finish().unwrap();
        let plain = {
            let mut sink = PcapSink::new(Vec::new()).unwrap();
            sink.write_frame(Duration::new(1, 5), &[1; 14]).unwrap();
            sink.into_inner()
        };
        assert_eq!(bytes, plain, "the same bytes as without a comment");
        let frame = CaptureReader::new(&bytes).unwrap().next().unwrap().unwrap();
        assert_eq!(frame.comment, None);
    }

    #[test]
    fn a_long_comment_is_cut_at_a_character_boundary() {
        let long = "é".repeat(40_000);
        let mut sink = PcapNgSink::new(Vec::new()).unwrap();
        sink.write_frame(Duration::ZERO, &[0; 14], Some(&long)).unwrap();
        let bytes = sink.into_inner();
        let frame = CaptureReader::new(&bytes).unwrap().next().unwrap().unwrap();
        let comment = frame.comment.unwrap();
        assert!(comment.len() <= MAX_COMMENT && comment.len() > MAX_COMMENT - 2);
        assert!(long.starts_with(comment));
    }

    #[test]
    fn pcapng_timestamps_follow_the_interfaces_resolution() {
        // Microseconds when the interface states none (the pcapng default).
        assert_eq!(scale_timestamp(1_500_000, 6), Duration::from_millis(1500));
        assert_eq!(scale_timestamp(1_500_000_001, 9), Duration::new(1, 500_000_001));
        assert_eq!(scale_timestamp(3, 0), Duration::from_secs(3));
        // Bit 7: a power of two (2^-10 s units).
        assert_eq!(scale_timestamp(1024 + 512, 0x80 | 10), Duration::from_millis(1500));
        assert_eq!(scale_timestamp(5, 0x7f), Duration::ZERO, "10^-127 s: none fits");
        assert_eq!(scale_timestamp(u128::MAX, 0), Duration::MAX);
    }

    #[test]
    fn garbage_is_not_a_capture() {
        assert!(matches!(
            CaptureReader::new(b"hello, this is not a pcap"),
            Err(CaptureError::NotACapture(_))
        ));
        assert!(CaptureReader::new(&[]).is_err());
    }
}
