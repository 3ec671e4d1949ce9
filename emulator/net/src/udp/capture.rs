//! The device's capture file (`UROCE_CAPTURE`): the shared capture writer
//! (`uroce_wire::pcap::CaptureWriter`, the simulated fabric's too) over a
//! buffered file that keeps the first error writing it, as a sentence
//! naming the file.

use super::{lock, mac_for, UdpError, UdpStats};
use core::net::IpAddr;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uroce_wire::pcap::{CaptureFormat, CaptureWriter};

/// The capture file, shared between the pcap writer and whoever flushes;
/// it keeps the first error writing it.
#[derive(Clone)]
pub(super) struct CaptureFile(Arc<Mutex<CaptureState>>);

struct CaptureState {
    writer: BufWriter<File>,
    path: PathBuf,
    /// The first write or flush that failed, as a sentence.
    failure: Option<String>,
}

impl CaptureFile {
    /// The first error writing the file, if any.
    pub(super) fn failure(&self) -> Option<String> {
        lock(&self.0).failure.clone()
    }
}

impl CaptureState {
    fn note<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            if self.failure.is_none() {
                let path = self.path.display();
                self.failure = Some(format!("could not write the capture file {path}: {e}"));
            }
        }
        result
    }
}

impl Write for CaptureFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = lock(&self.0);
        let result = state.writer.write(buf);
        state.note(result)
    }
    fn flush(&mut self) -> io::Result<()> {
        let mut state = lock(&self.0);
        let result = state.writer.flush();
        state.note(result)
    }
}

/// A device's capture: every packet sent and received, as Ethernet frames.
pub(super) struct Capture {
    writer: CaptureWriter<CaptureFile>,
    file: CaptureFile,
    /// Frames were written since the last flush.
    dirty: bool,
}

impl Capture {
    /// Creates the file and writes its header (pcapng under a scenario,
    /// whose firings are frame comments; classic pcap otherwise); an error
    /// names the path and the system's reason.
    pub(super) fn create(path: &Path, format: CaptureFormat) -> Result<Capture, UdpError> {
        let file = File::create(path).map_err(|e| {
            UdpError::Io(format!("cannot create the capture file {}", path.display()), e)
        })?;
        let state = CaptureState { writer: BufWriter::new(file), path: path.into(), failure: None };
        let file = CaptureFile(Arc::new(Mutex::new(state)));
        let writer = CaptureWriter::with_format(file.clone(), format).map_err(|e| {
            UdpError::Io(format!("cannot write the capture file {}", path.display()), e)
        })?;
        Ok(Capture { writer, file, dirty: false })
    }

    /// Writes an IP packet from `source` to `destination` as an Ethernet
    /// frame (MACs derived from the addresses, as the device's own is),
    /// with a comment (pcapng only: a scenario's firings).
    pub(super) fn packet(
        &mut self,
        stats: &mut UdpStats,
        source: IpAddr,
        destination: IpAddr,
        packet: &[u8],
        comment: Option<&str>,
    ) {
        let (to, from) = (mac_for(destination), mac_for(source));
        self.dirty = true;
        let written = self.writer.write_packet_commented(wall_clock(), to, from, packet, comment);
        if written.is_err() {
            stats.capture_errors += 1;
        }
    }

    /// Writes an Ethernet frame as it is (the L2 transport), with a
    /// comment (pcapng only).
    pub(super) fn frame(&mut self, stats: &mut UdpStats, frame: &[u8], comment: Option<&str>) {
        self.dirty = true;
        if self.writer.write_frame_commented(wall_clock(), frame, comment).is_err() {
            stats.capture_errors += 1;
        }
    }

    /// Ends a batch of frames: what was written goes to the file now, one
    /// write for the batch. A program that exits without closing its device
    /// (librdmacm never closes one, many verbs programs just exit) still
    /// leaves every frame up to its last batch in the file.
    pub(super) fn end_batch(&mut self) {
        if std::mem::take(&mut self.dirty) {
            let _ = self.file.flush();
        }
    }

    /// Writes what is buffered to the file. An error is this flush's or an
    /// earlier write's (the first one): the capture file misses frames.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        // A failed flush is noted as the file's failure, if it is the first.
        let _ = self.file.flush();
        match self.file.failure() {
            Some(failure) => Err(io::Error::other(failure)),
            None => Ok(()),
        }
    }
}

/// Capture timestamps: the wall clock, so that captures from several
/// processes line up.
fn wall_clock() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}
