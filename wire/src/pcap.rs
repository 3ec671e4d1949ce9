//! Reading and writing capture files (pcap and pcapng), with `pcap-file`.
//!
//! [`CaptureReader`] walks the frames of a whole file held in memory and
//! never panics, whatever the bytes: a damaged header is an error from
//! [`CaptureReader::new`], a damaged or cut record ends the walk with an
//! error item. [`PcapSink`] writes Ethernet frames, as uroce's `--capture`
//! will.

use crate::ethernet;
use crate::frame::Link;
use core::time::Duration;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError, TsResolution};
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
            let (interface_id, timestamp, orig_len, data) = match block {
                Block::EnhancedPacket(p) => (p.interface_id, p.timestamp, p.original_len, p.data),
                Block::SimplePacket(p) => (0, Duration::ZERO, p.original_len, p.data),
                // The obsolete Packet block: microseconds unless the interface says otherwise.
                Block::Packet(p) => (
                    u32::from(p.interface_id),
                    Duration::from_micros(p.timestamp),
                    p.original_len,
                    p.data,
                ),
                _ => continue,
            };
            let link_type =
                parser.interfaces().get(interface_id as usize).map(|i| u32::from(i.linktype));
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
            }));
        }
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
        let len = u32::try_from(frame.len()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "frame longer than u32::MAX bytes")
        })?;
        self.writer.write_packet(&PcapPacket::new(timestamp, len, frame)).map_err(write_error)?;
        Ok(())
    }

    /// Returns the writer.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
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
pub struct CaptureWriter<W: Write> {
    sink: Option<PcapSink<W>>,
    frame: Vec<u8>,
    frames: u64,
    error: Option<String>,
}

impl<W: Write> CaptureWriter<W> {
    /// Writes the file header (an error is the writer's own).
    pub fn new(writer: W) -> io::Result<CaptureWriter<W>> {
        Ok(CaptureWriter {
            sink: Some(PcapSink::new(writer)?),
            frame: Vec::new(),
            frames: 0,
            error: None,
        })
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
        let header = ethernet::Repr {
            source: source_mac,
            destination: destination_mac,
            ether_type: ethernet::ether_type_of_ip(packet),
        };
        let mut frame = core::mem::take(&mut self.frame);
        header.frame_into(packet, &mut frame);
        let result = self.write_frame(timestamp, &frame);
        self.frame = frame;
        result
    }

    /// Writes a whole frame as it is.
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> io::Result<()> {
        let Some(sink) = self.sink.as_mut() else {
            return Err(io::Error::other("the capture stopped after an earlier write error"));
        };
        match sink.write_frame(timestamp, frame) {
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
    fn garbage_is_not_a_capture() {
        assert!(matches!(
            CaptureReader::new(b"hello, this is not a pcap"),
            Err(CaptureError::NotACapture(_))
        ));
        assert!(CaptureReader::new(&[]).is_err());
    }
}
