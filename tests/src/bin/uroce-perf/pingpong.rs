//! A raw UDP ping-pong in uroce's own socket style: what a round trip
//! costs with the sockets the UDP runtime uses (`emulator/net/src/udp/
//! sockets.rs`, `sys.rs`), before any RDMA work.
//!
//! Each side, as a uroce device at its address: one unconnected socket
//! bound to `addr:port` (where every datagram arrives; don't-fragment, UDP
//! checksum off, 8 MiB buffers, UDP GRO on), and one more unconnected
//! socket bound to a source port of its own for sending (don't-fragment,
//! checksum off), sending with `sendmmsg` to `peer:port`. Receiving
//! is a busy poll as a busy-polling uroce application's is: after a poll
//! that found nothing, one `recvmsg`; after one that found something, a
//! `recvmmsg` of up to 64 datagrams (both `MSG_DONTWAIT`, with source
//! addresses and room for the GRO control message). The socket options and
//! the system calls are the runtime's own (`uroce_net::udp::raw`).
//!
//! The pinger (this process) starts the echo side as a child process
//! (itself, `--echo`), waits for its `ready` line, then times each round
//! trip with the monotonic clock. Both processes float (no pinning), as
//! `uroce bench`'s two processes do.

use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use uroce_net::udp::raw;

/// Bytes per receive buffer.
const BUFFER_BYTES: usize = 4200;
/// The first byte of the datagram that ends the echo side.
const STOP: u8 = 0xff;
/// A round trip that takes longer than this is a lost datagram.
const LOST_AFTER: Duration = Duration::from_secs(2);

pub struct Options {
    pub local: Ipv4Addr,
    pub peer: Ipv4Addr,
    pub port: u16,
    pub size: usize,
    pub iters: usize,
    pub warmup: usize,
    pub echo: bool,
}

pub fn usage() -> &'static str {
    "uroce-perf udp-pingpong [--addrs A,B] [--port P] [--size BYTES] [--iters N] [--warmup N]\n\
     \x20 A raw UDP ping-pong in uroce's socket style (unconnected sockets: one bound to\n\
     \x20 addr:P that receives, one per source port that sends with sendmmsg; busy-polled:\n\
     \x20 recvmsg after an empty poll, else recvmmsg). Starts the echo side at B as a\n\
     \x20 child process; prints metric=udp_pingpong_uroce_style_{median,min,p99}_us lines.\n\
     \x20 Defaults: --addrs 127.141.250.1,127.141.250.2 --port 4791 --size 64 --iters 20000\n\
     \x20 --warmup 1000"
}

pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        local: Ipv4Addr::new(127, 141, 250, 1),
        peer: Ipv4Addr::new(127, 141, 250, 2),
        port: 4791,
        size: 64,
        iters: 20_000,
        warmup: 1_000,
        echo: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--echo" {
            o.echo = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addrs" => {
                let (a, b) = value.split_once(',').ok_or("--addrs A,B")?;
                o.local = a.parse().map_err(|e| bad(&e))?;
                o.peer = b.parse().map_err(|e| bad(&e))?;
            }
            "--port" => o.port = value.parse().map_err(|e| bad(&e))?,
            "--size" => o.size = value.parse().map_err(|e| bad(&e))?,
            "--iters" => o.iters = value.parse().map_err(|e| bad(&e))?,
            "--warmup" => o.warmup = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if !(5..=BUFFER_BYTES).contains(&o.size) {
        return Err(format!("--size: 5 to {BUFFER_BYTES} bytes"));
    }
    if o.iters == 0 {
        return Err("--iters: at least 1".into());
    }
    Ok(o)
}

/// Don't-fragment and no UDP checksum, as on every socket of the runtime
/// without offload.
fn roce_options(socket: &UdpSocket) -> io::Result<()> {
    raw::set_dont_fragment(socket, false)?;
    raw::set_no_udp_checksum(socket, false)
}

/// One side's sockets and the scratch of its system calls: the runtime's
/// own calls (`uroce_net::udp::raw`).
struct Side {
    main: UdpSocket,
    tx: UdpSocket,
    peer: SocketAddr,
    /// The last poll found nothing: the next is one `recvmsg`.
    last_poll_empty: bool,
    buffers: Vec<Vec<u8>>,
    received: Vec<raw::Received>,
    rx_scratch: raw::ReceiveScratch,
    tx_scratch: raw::SendScratch,
}

impl Side {
    fn open(local: Ipv4Addr, peer: Ipv4Addr, port: u16, source_port: u16) -> io::Result<Side> {
        let main = UdpSocket::bind(SocketAddrV4::new(local, port))?;
        roce_options(&main)?;
        raw::set_receive_buffer(&main, raw::SOCKET_BUFFER_BYTES)?;
        raw::set_send_buffer(&main, raw::SOCKET_BUFFER_BYTES)?;
        // GRO is an optimisation, as in the runtime.
        let _ = raw::enable_gro(&main);
        let tx = UdpSocket::bind(SocketAddrV4::new(local, source_port))?;
        roce_options(&tx)?;
        let _ = raw::set_send_buffer(&tx, raw::SOCKET_BUFFER_BYTES);
        let _ = raw::set_receive_buffer(&tx, 4096);
        Ok(Side {
            main,
            tx,
            peer: SocketAddr::V4(SocketAddrV4::new(peer, port)),
            last_poll_empty: true,
            buffers: vec![vec![0; BUFFER_BYTES]; raw::RECEIVE_MAX],
            received: Vec::with_capacity(raw::RECEIVE_MAX),
            rx_scratch: raw::ReceiveScratch::new(),
            tx_scratch: raw::SendScratch::new(),
        })
    }

    /// One `sendmmsg` of one datagram from the source-port socket.
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        match raw::send_batch(&self.tx, &mut self.tx_scratch, &[(payload, self.peer)])? {
            1 => Ok(()),
            _ => Err(io::Error::other("the datagram was not sent")),
        }
    }

    /// One non-blocking receive, as the runtime's for a polling
    /// application: after an empty poll one `recvmsg`, else a `recvmmsg`
    /// of up to `RECEIVE_MAX` datagrams; returns how many arrived.
    fn receive(&mut self) -> io::Result<usize> {
        let n = if self.last_poll_empty {
            raw::receive_one(
                &self.main,
                &mut self.rx_scratch,
                &mut self.buffers[0],
                0,
                &mut self.received,
            )?
        } else {
            raw::receive_batch(
                &self.main,
                &mut self.rx_scratch,
                &mut self.buffers,
                0,
                &mut self.received,
            )?
        };
        self.last_poll_empty = n == 0;
        Ok(n)
    }

    fn received(&self, i: usize) -> &[u8] {
        &self.buffers[i][..self.received[i].len]
    }
}

/// The echo side gives up after this long without a datagram (its pinger
/// was stopped).
const ECHO_IDLE: Duration = Duration::from_secs(10);

/// The echo side: sends every datagram back until the stop datagram.
fn echo(o: &Options) -> io::Result<()> {
    let mut side = Side::open(o.local, o.peer, o.port, 49_153)?;
    println!("ready");
    let mut reply = Vec::with_capacity(BUFFER_BYTES);
    let mut last = Instant::now();
    loop {
        let n = side.receive()?;
        if n == 0 {
            if last.elapsed() > ECHO_IDLE {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no pinger"));
            }
            continue;
        }
        last = Instant::now();
        for i in 0..n {
            reply.clear();
            reply.extend_from_slice(side.received(i));
            if reply.first() == Some(&STOP) {
                return Ok(());
            }
            side.send(&reply)?;
        }
    }
}

/// Waits for the reply to `seq`; returns when it came.
fn await_reply(side: &mut Side, seq: u32) -> io::Result<Instant> {
    let start = Instant::now();
    loop {
        let n = side.receive()?;
        let now = Instant::now();
        for i in 0..n {
            let data = side.received(i);
            if data.len() >= 5 && data[1..5] == seq.to_le_bytes() {
                return Ok(now);
            }
        }
        if n == 0 && now - start > LOST_AFTER {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("round trip {seq} lost")));
        }
    }
}

fn ping(o: &Options) -> io::Result<()> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["udp-pingpong", "--echo", "--addrs", &format!("{},{}", o.peer, o.local)])
        .args(["--port", &o.port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let result = (|| {
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err(io::Error::other("the echo side did not start"));
        }
        let mut side = Side::open(o.local, o.peer, o.port, 49_152)?;
        let mut payload = vec![0u8; o.size];
        let mut samples = Vec::with_capacity(o.iters);
        for seq in 0..(o.warmup + o.iters) as u32 {
            payload[1..5].copy_from_slice(&seq.to_le_bytes());
            let sent = Instant::now();
            side.send(&payload)?;
            let back = await_reply(&mut side, seq)?;
            if seq as usize >= o.warmup {
                samples.push((back - sent).as_secs_f64() * 1e6);
            }
        }
        side.send(&[STOP])?;
        Ok(samples)
    })();
    let samples = match result {
        Ok(samples) => samples,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let _ = child.wait();
    let mut sorted = samples;
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    println!("metric=udp_pingpong_uroce_style_median_us value={:.3} unit=us", at(0.5));
    println!("metric=udp_pingpong_uroce_style_min_us value={:.3} unit=us", sorted[0]);
    println!("metric=udp_pingpong_uroce_style_p99_us value={:.3} unit=us", at(0.99));
    println!(
        "  # {} round trips of {} B between {} and {} (port {}), uroce's socket style",
        sorted.len(),
        o.size,
        o.local,
        o.peer,
        o.port
    );
    Ok(())
}

pub fn run(o: &Options) -> io::Result<()> {
    if o.echo {
        echo(o)
    } else {
        ping(o)
    }
}
