//! The two file writers: [`PcapSink`] (classic pcap) and [`PcapNgSink`]
//! (pcapng, frames with comments).

use core::time::Duration;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, PcapError, TsResolution};
use std::borrow::Cow;
use std::io::{self, Write};

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

/// The I/O error under a `pcap-file` error writing a capture.
fn write_error(error: PcapError) -> io::Error {
    match error {
        PcapError::IoError(e) => e,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}
