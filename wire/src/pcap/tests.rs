//! The capture files' tests: written, read back, cut, damaged.

use super::read::{scale_timestamp, PCAPNG_MAGIC};
use super::*;
use crate::frame::Link;
use core::time::Duration;
use std::io::{self, Write};

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
