//! `uroce decode`: the TSV contract, exit statuses, agreement with tshark,
//! and single-bit corruption caught frame by frame.

use std::path::{Path, PathBuf};
use std::process::Command;
use uroce_tests::cli::{uroce, Run};
use uroce_tests::{golden_dir, pcaps_in, shared_golden_dir};
use uroce_wire::frame::{classify, Classified, IpHeader};
use uroce_wire::pcap::CaptureReader;

fn decode_tsv(path: &Path) -> Run {
    uroce(&["decode", "--format", "tsv", path.to_str().unwrap()])
}

fn golden(name: &str) -> PathBuf {
    golden_dir().join(name)
}

#[test]
fn tsv_is_one_line_per_roce_frame_then_the_tally() {
    let run = decode_tsv(&golden("opcodes.pcap"));
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 53 + 1);
    assert_eq!(*lines.last().unwrap(), "# frames=82 roce=53 icrc_ok=53 icrc_bad=0 malformed=0");
    for line in &lines[..53] {
        assert_eq!(line.split('\t').count(), 10, "{line}");
    }
    // Frames read by hand from the capture.
    let expect = [
        "23\t169.254.0.2\t169.254.0.1\t0x65\tUD_SEND_ONLY_WITH_IMMEDIATE\t0x000013\t993904\t0\t256\tok",
        "25\t169.254.0.2\t169.254.0.1\t0x26\tUC_RDMA_WRITE_FIRST\t0x000012\t993905\t0\t1024\tok",
        "33\t169.254.0.2\t169.254.0.1\t0x03\tRC_SEND_LAST_WITH_IMMEDIATE\t0x000011\t993907\t1\t952\tok",
        "45\t169.254.0.2\t169.254.0.1\t0x04\tRC_SEND_ONLY\t0x000011\t993914\t1\t2\tok",
        "54\t169.254.0.1\t169.254.0.2\t0x11\tRC_ACKNOWLEDGE\t0x000011\t993919\t0\t0\tok",
        "73\t169.254.0.2\t169.254.0.1\t0x0c\tRC_RDMA_READ_REQUEST\t0x000011\t993921\t1\t0\tok",
    ];
    for line in expect {
        assert!(lines.contains(&line), "missing line {line:?}");
    }
}

#[test]
fn text_output_spells_out_headers_and_naks() {
    let run = uroce(&["decode", golden("opcodes.pcap").to_str().unwrap()]);
    assert_eq!(run.code, 0);
    let out = &run.stdout;
    assert!(out.contains("(not RoCE) ARP"));
    assert!(out.contains("RETH[va=0x7f823cb88000 rkey=0x000002f9 dma_len=3000]"));
    assert!(out.contains("AETH[RNR-NAK timer=20 (10240 us) msn=9]"));
    assert!(out.contains("AETH[NAK remote-access-error msn=12]"));
    assert!(out.contains("DETH[qkey=0x11111111 src_qp=0x000013]"));
    assert!(out.contains("IETH[rkey=0x08000152]"));
    assert!(out.contains("summary: frames=82 roce=53 icrc_ok=53 icrc_bad=0 malformed=0"));
    let atomic = uroce(&["decode", golden("atomic_bw.pcap").to_str().unwrap()]);
    assert!(atomic.stdout.contains("AtomicETH[va=0x"));
    assert!(atomic.stdout.contains("AtomicAckETH[orig=0x"));
}

#[test]
fn cm_mads_to_qp1_show_the_message_and_what_ties_the_connection() {
    let run = uroce(&["decode", golden("rping.pcap").to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let cm: Vec<&str> = run.stdout.lines().filter(|l| l.contains(" CM[")).collect();
    // Linux rxe's rping: REQ, REP, RTU, then DREQ, DREP (frames 20-22,
    // 143-144), the fields read with tshark.
    let expect = [
        "CM[REQ lcid=0x8f4432ca sid=0x0000000001061c06 qpn=0x000011 psn=13043961 mtu=1024 retry=7 rnr=7 rdma_cm 169.254.0.2:47904 -> 169.254.0.1:7174 tid=0x00000002ca32448f]",
        "CM[REP lcid=0x5a6e41d4 rcid=0x8f4432ca qpn=0x000011 psn=3082820 tid=0x00000002ca32448f]",
        "CM[RTU lcid=0x8f4432ca rcid=0x5a6e41d4 tid=0x00000002ca32448f]",
        "CM[DREQ lcid=0x8f4432ca rcid=0x5a6e41d4 qpn=0x000011 tid=0x00000002ca32448f]",
        "CM[DREP lcid=0x5a6e41d4 rcid=0x8f4432ca tid=0x00000002ca32448f]",
    ];
    assert_eq!(cm.len(), expect.len(), "{cm:#?}");
    for (line, want) in cm.iter().zip(expect) {
        assert!(line.contains(want), "{line}\n  wants {want}");
    }
    let other = uroce(&["decode", golden("opcodes.pcap").to_str().unwrap()]);
    assert!(!other.stdout.contains(" CM["), "no QP1 traffic there");
}

#[test]
fn every_shipped_capture_decodes_clean() {
    for path in pcaps_in(&golden_dir()) {
        let run = decode_tsv(&path);
        assert_eq!(run.code, 0, "{}: {}", path.display(), run.stdout.lines().last().unwrap());
        assert!(run.stderr.is_empty());
    }
}

#[test]
fn unreadable_files_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pcap");
    let run = decode_tsv(&missing);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("missing.pcap"), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1);

    let garbage = dir.path().join("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture file at all").unwrap();
    let run = decode_tsv(&garbage);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("garbage.pcap") && run.stderr.contains("not a pcap"));

    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(decode_tsv(&empty).code, 2);
}

#[test]
fn a_file_cut_inside_a_record_prints_what_it_read_then_exits_2() {
    let bytes = std::fs::read(golden("opcodes.pcap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let run = decode_tsv(&cut);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("cut.pcap") && run.stderr.contains("cut short"), "{}", run.stderr);
    let tally = run.stdout.lines().last().unwrap();
    assert!(tally.starts_with("# frames="), "{tally}");
    assert!(run.stdout.lines().count() > 5, "frames before the cut are printed");
}

#[test]
fn every_cut_point_of_a_capture_is_handled() {
    // Cut at every length: the decoder never panics, and says 2 exactly
    // when the cut is not on a record boundary.
    let bytes = std::fs::read(golden("rping.pcap")).unwrap();
    let mut boundaries = vec![24usize];
    let mut at = 24;
    while at < bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
        boundaries.push(at);
    }
    for len in (0..bytes.len()).step_by(7) {
        let result = uroce::decode::decode_bytes(
            &bytes[..len],
            uroce::decode::Format::Tsv,
            &mut std::io::sink(),
        );
        match result {
            Err(_) => assert!(len < 24, "header error at {len}"),
            Ok((_, cut)) => assert_eq!(cut.is_some(), !boundaries.contains(&len), "cut at {len}"),
        }
    }
}

/// The byte ranges inside a frame where a flipped bit must be caught by a
/// receiving NIC while the frame stays a RoCEv2 frame: the IPv4 header but
/// its version/IHL byte, fragment fields and protocol (TOS, TTL and the
/// checksum are masked by the ICRC but caught by the header checksum); the
/// IPv6 payload length and addresses (traffic class, flow label and hop
/// limit are masked by the ICRC and IPv6 has no header checksum, so a flip
/// there is undetectable by design, on real rxe too); the UDP header but
/// its destination port; and every byte after the UDP header except BTH
/// byte 4 (FECN/BECN), which is legitimately variant.
fn catchable_bits(frame: &[u8], ip_offset: usize, ip: &IpHeader, ip_len: usize) -> Vec<usize> {
    let mut bytes: Vec<usize> = Vec::new();
    let udp = ip_offset + ip_len;
    match ip {
        IpHeader::V4(_) => {
            bytes.extend((ip_offset + 1..ip_offset + 6).chain(ip_offset + 8..ip_offset + 9));
            bytes.extend(ip_offset + 10..udp);
        }
        IpHeader::V6(_) => {
            bytes.extend(ip_offset + 4..ip_offset + 6);
            bytes.extend(ip_offset + 8..udp);
        }
    }
    bytes.extend((udp..udp + 2).chain(udp + 4..udp + 8));
    let bth = udp + 8;
    bytes.extend((bth..frame.len()).filter(|&b| b != bth + 4));
    let mut bits: Vec<usize> =
        bytes.iter().flat_map(|b| (0..8).map(move |bit| b * 8 + bit)).collect();
    if let IpHeader::V4(_) = ip {
        // The DF flag (a bit of byte 6) is covered by the ICRC too.
        bits.push((ip_offset + 6) * 8 + 6);
    }
    bits
}

/// Offsets of each pcap record's data in a little-endian classic pcap.
fn record_offsets(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut records = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        records.push((at + 16, incl));
        at += 16 + incl;
    }
    records
}

#[test]
fn single_bit_flips_are_reported_exactly_on_the_flipped_frames() {
    for seed in 1..=60u64 {
        flip_round(seed);
    }
}

fn flip_round(seed: u64) {
    let mut rng_state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rng = move || {
        // xorshift64*: a fixed-seed generator, so a failure reproduces.
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        rng_state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let dir = tempfile::tempdir().unwrap();
    for name in ["opcodes.pcap", "rc_pingpong_v6.pcap", "read_bw.pcap", "atomic_bw.pcap"] {
        let original = std::fs::read(golden(name)).unwrap();
        let mut bytes = original.clone();
        let mut flipped = Vec::new();
        let mut positions = Vec::new();
        for (index, &(data_at, len)) in record_offsets(&original).iter().enumerate() {
            let data = &original[data_at..data_at + len];
            let Classified::Roce(roce) = classify(data, uroce_wire::frame::Link::Ethernet) else {
                continue;
            };
            if rng() % 3 != 0 {
                continue; // leave two frames in three alone
            }
            let ip_offset = data.len() - roce.transport().len() - 8 - roce.ip.header_len();
            let bits = catchable_bits(data, ip_offset, &roce.ip, roce.ip.header_len());
            let bit = bits[(rng() % bits.len() as u64) as usize];
            bytes[data_at + bit / 8] ^= 1 << (bit % 8);
            positions.push(format!("frame {} byte {} bit {}", index + 1, bit / 8, bit % 8));
            flipped.push(index + 1);
        }
        assert!(flipped.len() > 5, "{name}: too few flips");
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let run = decode_tsv(&path);
        assert_eq!(run.code, 1, "{name} seed {seed}: a bad frame means exit 1");
        let bad: Vec<usize> = run
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#') && l.ends_with("\tbad"))
            .map(|l| l.split('\t').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(bad, flipped, "{name} seed {seed}: frames reported bad; flips: {positions:?}");
        let roce_before = decode_tsv(&golden(name)).stdout.lines().count();
        assert_eq!(run.stdout.lines().count(), roce_before, "{name}: still the same RoCEv2 frames");
    }
}

fn tshark_fields(path: &Path) -> Option<Vec<String>> {
    let output = Command::new("tshark")
        .args(["-r", path.to_str().unwrap(), "-Y", "infiniband", "-T", "fields"])
        .args(["-e", "frame.number", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output()
        .ok()?;
    assert!(output.status.success(), "tshark failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    Some(
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let num = |s: &str| -> u32 {
                    match s.strip_prefix("0x") {
                        Some(hex) => u32::from_str_radix(hex, 16).unwrap(),
                        None => s.parse().unwrap(),
                    }
                };
                format!("{}\t0x{:02x}\t0x{:06x}\t{}", f[0], num(f[1]), num(f[2]), num(f[3]))
            })
            .collect(),
    )
}

#[test]
fn decode_agrees_with_tshark_on_frame_opcode_qp_and_psn() {
    let mut dirs = vec![golden_dir()];
    dirs.extend(shared_golden_dir());
    let mut compared = 0;
    for path in dirs.iter().flat_map(|d| pcaps_in(d)) {
        let Some(theirs) = tshark_fields(&path) else {
            assert!(std::env::var_os("CI").is_none(), "CI must have tshark (.ci/run installs it)");
            println!("tshark not installed: comparison skipped");
            return;
        };
        let run = decode_tsv(&path);
        assert_eq!(run.code, 0);
        let ours: Vec<String> = run
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                format!("{}\t{}\t{}\t{}", f[0], f[3], f[5], f[6])
            })
            .collect();
        assert_eq!(ours, theirs, "{}", path.display());
        compared += ours.len();
    }
    println!("{compared} RoCEv2 frames agree with tshark");
    assert!(compared > 400);
}

#[test]
fn capture_reader_reads_pcapng_from_tshark() {
    // tshark writes pcapng by default: decode must read it too.
    let dir = tempfile::tempdir().unwrap();
    let ng = dir.path().join("opcodes.pcapng");
    let status = Command::new("tshark")
        .args(["-r", golden("opcodes.pcap").to_str().unwrap(), "-w", ng.to_str().unwrap()])
        .args(["-F", "pcapng"])
        .status();
    match status {
        Ok(s) if s.success() => {}
        _ => {
            assert!(std::env::var_os("CI").is_none(), "CI must have tshark");
            println!("tshark not installed: pcapng check skipped");
            return;
        }
    }
    let bytes = std::fs::read(&ng).unwrap();
    assert_eq!(CaptureReader::new(&bytes).unwrap().count(), 82);
    // The same times as the pcap (the interface's if_tsresol honoured).
    let original = std::fs::read(golden("opcodes.pcap")).unwrap();
    let times = |b: &[u8]| -> Vec<_> {
        CaptureReader::new(b).unwrap().map(|f| f.unwrap().timestamp).collect()
    };
    assert_eq!(times(&bytes), times(&original));
    let run = decode_tsv(&ng);
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout.lines().last().unwrap(),
        "# frames=82 roce=53 icrc_ok=53 icrc_bad=0 malformed=0"
    );
}

#[test]
fn a_pcapng_capture_with_comments_reads_back_here_and_in_tshark() {
    use std::time::Duration;
    use uroce_wire::pcap::{CaptureFormat, CaptureWriter};
    // A real capture, rewritten as pcapng with comments on two frames.
    let source = std::fs::read(golden("opcodes.pcap")).unwrap();
    let frames: Vec<Vec<u8>> =
        CaptureReader::new(&source).unwrap().map(|f| f.unwrap().data.to_vec()).collect();
    let t0 = Duration::new(1_700_000_000, 123_456_789);
    let comment = |n: usize| match n {
        0 => Some("uroce scenario: rule cut fired 1: partition"),
        3 => Some("DROPPED\tby rule lossy\nsecond line"),
        _ => None,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("commented.pcapng");
    let file = std::fs::File::create(&path).unwrap();
    let mut capture = CaptureWriter::with_format(file, CaptureFormat::PcapNg).unwrap();
    for (n, frame) in frames.iter().enumerate() {
        let at = t0 + Duration::from_micros(n as u64 * 1500);
        capture.write_frame_commented(at, frame, comment(n)).unwrap();
    }
    capture.finish().unwrap();

    // Our reader: the frames, their comments and times.
    let bytes = std::fs::read(&path).unwrap();
    let read: Vec<_> = CaptureReader::new(&bytes).unwrap().map(Result::unwrap).collect();
    assert_eq!(read.len(), frames.len());
    for (n, frame) in read.iter().enumerate() {
        assert_eq!(frame.data, &frames[n][..]);
        assert_eq!(frame.comment, comment(n), "frame {}", n + 1);
        assert_eq!(frame.timestamp, t0 + Duration::from_micros(n as u64 * 1500));
    }

    // `uroce decode` prints each comment under its frame.
    let text = uroce(&["decode", path.to_str().unwrap()]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let lines: Vec<&str> = text.stdout.lines().collect();
    let at = lines.iter().position(|l| l.contains("comment:")).expect("a comment line");
    assert!(lines[at - 1].trim_start().starts_with("1 "), "after frame 1: {}", lines[at - 1]);
    assert_eq!(lines[at], "        comment: uroce scenario: rule cut fired 1: partition");
    assert!(
        text.stdout.contains("        comment: DROPPED\\tby rule lossy\\nsecond line\n"),
        "{}",
        text.stdout
    );
    let tsv = decode_tsv(&path);
    assert_eq!(tsv.code, 0);
    let tsv_lines: Vec<&str> = tsv.stdout.lines().collect();
    assert!(
        tsv_lines.contains(&"# comment 1: uroce scenario: rule cut fired 1: partition"),
        "{}",
        tsv.stdout
    );
    assert!(tsv_lines.contains(&"# comment 4: DROPPED\\tby rule lossy\\nsecond line"));

    // tshark: the comment, and the first timestamp to the nanosecond (the
    // interface's if_tsresol 9; without it, tshark reads microseconds).
    let output = Command::new("tshark")
        .args(["-r", path.to_str().unwrap(), "-T", "fields"])
        .args(["-e", "frame.comment", "-e", "frame.time_epoch"])
        .output();
    let Ok(output) = output else {
        assert!(std::env::var_os("CI").is_none(), "CI must have tshark (.ci/run installs it)");
        println!("tshark not installed: pcapng comment check skipped");
        return;
    };
    assert!(output.status.success(), "tshark failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), frames.len(), "{stdout}");
    assert_eq!(rows[0][0], "uroce scenario: rule cut fired 1: partition", "{stdout}");
    assert_eq!(rows[0][1], "1700000000.123456789", "{stdout}");
    assert_eq!(rows[1][0], "", "frame 2 has no comment: {stdout}");
    assert_eq!(rows[1][1], "1700000000.124956789", "{stdout}");
    assert!(rows[3][0].starts_with("DROPPED"), "{stdout}");
    // And tshark reads the frames as the RoCEv2 they are.
    let original = tshark_fields(&golden("opcodes.pcap")).unwrap();
    assert!(!original.is_empty());
    assert_eq!(tshark_fields(&path).unwrap(), original);
}
