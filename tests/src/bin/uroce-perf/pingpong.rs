//! A raw UDP ping-pong in uroce's own socket style: what a round trip
//! costs with the sockets the UDP runtime uses (`emulator/net/src/udp/
//! sockets.rs`, `sys.rs`), before any RDMA work.
//!
//! Each side, as a uroce device at its address: one unconnected socket
//! bound to `addr:port` (where every datagram arrives; don't-fragment, UDP
//! checksum off, 8 MiB buffers, UDP GRO on), and one more unconnected
//! socket bound to a source port of its own for sending (don't-fragment,
//! checksum off), sending with `sendmmsg` to `peer:port`. Receiving is a
//! busy poll of `recvmmsg` (up to 64 datagrams, `MSG_DONTWAIT`, with
//! source addresses and room for the GRO control message), as a
//! busy-polling uroce application's receive path does.
//!
//! The pinger (this process) starts the echo side as a child process
//! (itself, `--echo`), waits for its `ready` line, then times each round
//! trip with the monotonic clock. Both processes float (no pinning), as
//! `uroce bench`'s two processes do.

use std::io::{self, BufRead, BufReader};
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Socket buffers asked for (the runtime's `SOCKET_BUFFER_BYTES`).
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;
/// Datagrams per `recvmmsg` (the runtime's `RECEIVE_MAX`).
const RECEIVE_MAX: usize = 64;
/// Bytes per receive buffer.
const BUFFER_BYTES: usize = 4200;
/// Room for one control message (the runtime's `CONTROL_LEN`).
const CONTROL_LEN: usize = 64;
/// `UDP_GRO` (linux/udp.h) and `SOL_UDP`.
const UDP_GRO: libc::c_int = 104;
const SOL_UDP: libc::c_int = 17;
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
     \x20 addr:P that receives, one per source port that sends with sendmmsg; busy-polled\n\
     \x20 recvmmsg). Starts the echo side at B as a child process; prints\n\
     \x20 metric=udp_pingpong_uroce_style_{median,min,p99}_us lines.\n\
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

fn set_option(socket: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) {
    // SAFETY: `value` lives for the call and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        // The runtime fails on don't-fragment and checksum errors and
        // ignores the rest; here every option is only a matter of speed.
        eprintln!("setsockopt({level}, {name}): {}", io::Error::last_os_error());
    }
}

/// Don't-fragment and no UDP checksum, as on every socket of the runtime.
fn roce_options(socket: &UdpSocket) {
    set_option(socket, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO);
    set_option(socket, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1);
}

/// One side's sockets and the scratch of its system calls.
struct Side {
    main: UdpSocket,
    tx: UdpSocket,
    peer: SocketAddrV4,
    buffers: Vec<Vec<u8>>,
    iovecs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    controls: Vec<[u64; CONTROL_LEN / 8]>,
    headers: Vec<libc::mmsghdr>,
}

impl Side {
    fn open(local: Ipv4Addr, peer: Ipv4Addr, port: u16, source_port: u16) -> io::Result<Side> {
        let main = UdpSocket::bind(SocketAddrV4::new(local, port))?;
        roce_options(&main);
        set_option(&main, libc::SOL_SOCKET, libc::SO_RCVBUF, SOCKET_BUFFER_BYTES);
        set_option(&main, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER_BYTES);
        set_option(&main, SOL_UDP, UDP_GRO, 1);
        let tx = UdpSocket::bind(SocketAddrV4::new(local, source_port))?;
        roce_options(&tx);
        set_option(&tx, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER_BYTES);
        set_option(&tx, libc::SOL_SOCKET, libc::SO_RCVBUF, 4096);
        // SAFETY: all-zero bytes are valid for these plain C structs.
        let zero_iovec: libc::iovec = unsafe { zeroed() };
        Ok(Side {
            main,
            tx,
            peer: SocketAddrV4::new(peer, port),
            buffers: vec![vec![0; BUFFER_BYTES]; RECEIVE_MAX],
            iovecs: vec![zero_iovec; RECEIVE_MAX],
            // SAFETY: as above.
            names: vec![unsafe { zeroed() }; RECEIVE_MAX],
            controls: vec![[0; CONTROL_LEN / 8]; RECEIVE_MAX],
            // SAFETY: as above.
            headers: vec![unsafe { zeroed() }; RECEIVE_MAX],
        })
    }

    /// One `sendmmsg` of one datagram from the source-port socket.
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: self.peer.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(self.peer.ip().octets()) },
            sin_zero: [0; 8],
        };
        let mut iov = libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: payload.len() };
        // SAFETY: all-zero bytes are a valid mmsghdr.
        let mut header: libc::mmsghdr = unsafe { zeroed() };
        header.msg_hdr.msg_name =
            (&to as *const libc::sockaddr_in as *mut libc::sockaddr_in).cast();
        header.msg_hdr.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        header.msg_hdr.msg_iov = &mut iov;
        header.msg_hdr.msg_iovlen = 1;
        // SAFETY: the header points at `to` and `iov`, which point at the
        // payload; all outlive the call, and the kernel only reads them.
        let sent = unsafe { libc::sendmmsg(self.tx.as_raw_fd(), &mut header, 1, 0) };
        if sent == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// One non-blocking `recvmmsg` of up to [`RECEIVE_MAX`] datagrams;
    /// returns how many arrived (their lengths in the headers).
    fn receive(&mut self) -> io::Result<usize> {
        for i in 0..RECEIVE_MAX {
            self.iovecs[i] = libc::iovec {
                iov_base: self.buffers[i].as_mut_ptr().cast(),
                iov_len: BUFFER_BYTES,
            };
            let hdr = &mut self.headers[i].msg_hdr;
            hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut self.iovecs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = self.controls[i].as_mut_ptr().cast();
            hdr.msg_controllen = CONTROL_LEN as _;
            hdr.msg_flags = 0;
        }
        // SAFETY: every header points at an iovec, a name and a control
        // buffer of this side with their true lengths, and each iovec at
        // its own buffer, all borrowed mutably for the call.
        let n = unsafe {
            libc::recvmmsg(
                self.main.as_raw_fd(),
                self.headers.as_mut_ptr(),
                RECEIVE_MAX as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(err),
        }
    }

    fn received(&self, i: usize) -> &[u8] {
        &self.buffers[i][..self.headers[i].msg_len as usize]
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
