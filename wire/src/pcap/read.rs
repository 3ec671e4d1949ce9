//! Reading a capture file held in memory: [`CaptureReader`] and the
//! frames it yields, pcap or pcapng.

use crate::frame::Link;
use core::time::Duration;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, PcapError, TsResolution};
use std::borrow::Cow;

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

pub(super) const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

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
pub(super) fn scale_timestamp(raw: u128, resolution: u8) -> Duration {
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
