//! Issue 11's reproduction on the real path: while `uroce pingpong -c` and
//! `uroce bench write bw` run between two processes, a forger sends the
//! client's QP 300 NAKs (fatal, PSN-sequence and RNR, timer 655 ms) with
//! valid ICRCs, from the server's address, at PSNs behind the client's
//! window: far behind its first PSN, and ones it sent and saw acknowledged
//! long ago. Every one must be dropped and counted
//! (`rcvd_ghost_response`), and the runs must succeed with their data
//! checked. Each run is also made without the forger, and both times are
//! printed side by side (a figure to read, not a timed assertion: the
//! counters are the proof that nothing was acted on, no go-back and no
//! RNR wait).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uroce_tests::child::{self, Finished, Running};
use uroce_tests::report::counter_lines;
use uroce_wire::aeth::{self, NakCode, Syndrome};
use uroce_wire::frame::FrameRepr;
use uroce_wire::{bth, roce, Opcode, Psn, Qpn};

const CHILD_ENV: &str = "UROCE_SPOOFED_NAKS_CHILD";
const CHILD_LIMIT: Duration = Duration::from_secs(120);
/// Forged NAKs per run.
const FORGED: u32 = 300;
/// Iterations of each run: enough for the forger's 0.4 s in this build
/// (the child is this test binary, so a release build runs ten times
/// faster).
const ITERATIONS: &str = if cfg!(debug_assertions) { "3000" } else { "30000" };

#[test]
fn spoofed_naks_child() {
    child::run_if_child(CHILD_ENV);
}

fn spawn(addr: Ipv4Addr, args: &[&str]) -> Running {
    child::spawn("spoofed_naks_child", CHILD_ENV, args, &[("UROCE_ADDR", addr.to_string())])
}

/// The QPN and first PSN in a tool's "local address" line, in either
/// format (`QPN 0x000010, PSN 0x2635a4` or `QPN 0x0010 PSN 0xf3017c`).
fn qpn_and_psn(line: &str) -> (Qpn, Psn) {
    let hex_after = |key: &str| -> u32 {
        let rest = &line[line.find(key).unwrap_or_else(|| panic!("{key} in {line}")) + key.len()..];
        let digits: String = rest
            .trim_start()
            .trim_start_matches("0x")
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        u32::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("{key} in {line}"))
    };
    (Qpn::new(hex_after("QPN")), Psn::new(hex_after("PSN")))
}

/// The UDP payload of an RC_ACKNOWLEDGE with `syndrome` at `psn` to `qpn`,
/// from `from:sport` to `to:4791`, its ICRC computed over the headers the
/// receiving runtime rebuilds (IPv4 ID 0, DF, UDP checksum 0).
fn forged_nak(
    from: Ipv4Addr,
    sport: u16,
    to: Ipv4Addr,
    qpn: Qpn,
    psn: Psn,
    syndrome: Syndrome,
) -> Vec<u8> {
    let bth = bth::Repr::new(Opcode::RC_ACKNOWLEDGE, qpn, psn, 0);
    let ext = roce::ExtHeaders {
        aeth: Some(aeth::Repr { syndrome, msn: 1 }),
        ..roce::ExtHeaders::default()
    };
    let frame = FrameRepr::ipv4((from, to), 0, sport, roce::Repr { bth, ext, payload: &[] })
        .expect("frame");
    let mut bytes = vec![0; frame.buffer_len()];
    frame.emit(&mut bytes).expect("emit");
    bytes.split_off(20 + 8)
}

/// The i-th forged NAK's syndrome: the three fatal ones, a PSN-sequence
/// error, and an RNR NAK asking for the longest wait (655 ms).
fn syndrome(i: u32) -> Syndrome {
    match i % 5 {
        0 => Syndrome::Nak(NakCode::InvalidRequest),
        1 => Syndrome::Nak(NakCode::RemoteAccessError),
        2 => Syndrome::Nak(NakCode::RemoteOperationalError),
        3 => Syndrome::Nak(NakCode::PsnSequenceError),
        _ => Syndrome::RnrNak { timer_code: 0 },
    }
}

/// Sends [`FORGED`] NAKs to the client's QP, one a millisecond from 100 ms
/// after it connected, from the server's address: odd ones behind the
/// client's first PSN (1 to 2^22 back, the 2^20 among them), even
/// ones at PSNs the client sent and had acknowledged (its first 64: by
/// then it has done hundreds of iterations).
/// Stops early when `stop` is set; returns how many it sent.
fn forge_naks(
    server: Ipv4Addr,
    client: Ipv4Addr,
    qpn: Qpn,
    first_psn: Psn,
    stop: &AtomicBool,
) -> u32 {
    let socket = UdpSocket::bind((server, 0)).expect("bind the forger");
    let sport = socket.local_addr().expect("address").port();
    let to = SocketAddr::from((client, 4791));
    std::thread::sleep(Duration::from_millis(100));
    let mut sent = 0;
    for i in 0..FORGED {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let psn = if i % 2 == 1 {
            let back = [1 << 20, 1, 3, (1 << 22) - 1, 977 * (i + 1)][(i / 2 % 5) as usize];
            first_psn - back
        } else {
            first_psn + (i / 2) % 64
        };
        let packet = forged_nak(server, sport, client, qpn, psn, syndrome(i));
        socket.send_to(&packet, to).expect("send");
        sent += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    sent
}

struct Run {
    server: Finished,
    client: Finished,
    forged: u32,
    seconds: f64,
}

/// Runs `args` as a server at `net.1` and a client at `net.2` (port
/// `port`), forging NAKs at the client when `attack`.
fn run(net: [u8; 3], port: u16, args: &[&str], attack: bool) -> Run {
    let server_ip = Ipv4Addr::new(net[0], net[1], net[2], 1);
    let client_ip = Ipv4Addr::new(net[0], net[1], net[2], 2);
    let port = port.to_string();
    let mut server_args = args.to_vec();
    server_args.extend(["-p", &port, "--counters"]);
    let server = spawn(server_ip, &server_args);
    // pingpong's server prints its address at once, bench's waits for a
    // client first and says so.
    let ready = if args[0] == "bench" { "Waiting for client" } else { "local address" };
    assert!(server.wait_for_line(ready, Duration::from_secs(30)), "server up");
    let server_ip_text = server_ip.to_string();
    let mut client_args = server_args.clone();
    client_args.push(&server_ip_text);
    let started = Instant::now();
    let client = spawn(client_ip, &client_args);
    let local = client.line_with("local address", Duration::from_secs(30)).expect("client up");
    let (qpn, first_psn) = qpn_and_psn(&local);
    let stop = Arc::new(AtomicBool::new(false));
    let forger = attack.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || forge_naks(server_ip, client_ip, qpn, first_psn, &stop))
    });
    let client = client.finish(Instant::now() + CHILD_LIMIT);
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let forged = forger.map_or(0, |f| f.join().expect("forger"));
    let server = server.finish(Instant::now() + CHILD_LIMIT);
    Run { server, client, forged, seconds }
}

/// The client's HCA counter `name` (0 when not printed).
fn client_counter(run: &Run, client_ip: &str, name: &str) -> u64 {
    counter_lines(&run.client.stderr)
        .get(&("counter".to_string(), client_ip.to_string(), name.to_string()))
        .copied()
        .unwrap_or(0)
}

fn check_attacked(name: &str, clean: &Run, attacked: &Run, client_ip: &str) {
    for (side, end) in [("server", &attacked.server), ("client", &attacked.client)] {
        assert_eq!(end.code, Some(0), "{name} {side} under attack:\n{}", end.output());
    }
    assert_eq!(attacked.forged, FORGED, "{name}: the run ended before the forger was done");
    let ghosts = client_counter(attacked, client_ip, "rcvd_ghost_response");
    assert!(
        ghosts >= u64::from(attacked.forged),
        "{name}: {} forged NAKs, {ghosts} dropped as ghosts:\n{}",
        attacked.forged,
        attacked.client.stderr
    );
    assert_eq!(
        client_counter(attacked, client_ip, "rcvd_rnr_err"),
        0,
        "{name}: an RNR NAK was obeyed"
    );
    assert_eq!(client_counter(attacked, client_ip, "retry_exceeded_err"), 0, "{name}");
    println!(
        "{name}: clean {:.3} s, with {} forged NAKs {:.3} s (ratio {:.2}); client go-backs clean {} attacked {}, sequence NAKs clean {} attacked {}",
        clean.seconds,
        attacked.forged,
        attacked.seconds,
        attacked.seconds / clean.seconds,
        client_counter(clean, client_ip, "completer_retry_err"),
        client_counter(attacked, client_ip, "completer_retry_err"),
        client_counter(clean, client_ip, "rcvd_seq_err"),
        client_counter(attacked, client_ip, "rcvd_seq_err"),
    );
}

#[test]
fn pingpong_with_data_checks_survives_300_stale_naks() {
    let args = ["pingpong", "-g", "1", "-n", ITERATIONS, "-s", "4096", "-c"];
    let clean = run([127, 83, 42], 18642, &args, false);
    assert_eq!(clean.client.code, Some(0), "{}", clean.client.output());
    let attacked = run([127, 83, 43], 18643, &args, true);
    check_attacked("pingpong -c", &clean, &attacked, "127.83.43.2");
}

#[test]
fn bench_write_bw_survives_300_stale_naks() {
    let args = ["bench", "write", "bw", "-s", "65536", "-n", ITERATIONS];
    let clean = run([127, 83, 44], 18644, &args, false);
    assert_eq!(clean.client.code, Some(0), "{}", clean.client.output());
    let attacked = run([127, 83, 45], 18645, &args, true);
    check_attacked("bench write bw", &clean, &attacked, "127.83.45.2");
}
