//! [`CaptureWriter`]: the capture the simulated fabric and the runtime
//! write, in either format ([`CaptureFormat`]).

use super::sinks::{PcapNgSink, PcapSink};
use crate::ethernet;
use core::time::Duration;
use std::io::{self, Write};

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
