//! Command-line parsing: one subcommand per job.

use crate::decode::{self, Format};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

/// uroce: a software RoCEv2 RDMA NIC in user space.
#[derive(Debug, Parser)]
#[command(name = "uroce", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a RoCEv2 capture (pcap or pcapng): one line per frame.
    ///
    /// Every UDP datagram to port 4791 is read as RoCEv2: its transport
    /// headers are checked against the opcode table and its ICRC is
    /// recomputed. Exit status: 0 when every RoCEv2 frame is well formed
    /// with a good ICRC, 1 otherwise, 2 when the file cannot be read.
    Decode {
        /// The capture file.
        file: PathBuf,
        /// `text`: a line a person reads, with every extension header.
        /// `tsv`: exactly one tab-separated line per RoCEv2 frame (frame,
        /// src, dst, opcode, name, dqpn, psn, ackreq, paylen, icrc), then a
        /// `# frames=... roce=... icrc_ok=... icrc_bad=... malformed=...`
        /// line.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// Runs the command line `args` (program name first); returns the exit
/// status.
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            let is_help = !e.use_stderr();
            let _ = if is_help { write!(out, "{text}") } else { write!(err, "{text}") };
            return if is_help { 0 } else { 2 };
        }
    };
    match cli.command {
        Command::Decode { file, format } => decode::run(&file, format, out, err),
    }
}
