//! The out-of-band TCP channel the tools (pingpong, bench, perftest) use
//! to exchange QP numbers, PSNs, keys and addresses before RDMA starts.
//!
//! Over the UDP runtime it is a kernel TCP connection. Over the L2
//! transport (`UROCE_LINK`) the device is a host on an Ethernet segment of
//! its own, with no kernel stack behind it, so the same exchange runs over
//! a TCP socket of the device's own TCP/IP stack, on the same link as its
//! RoCE traffic: nothing is forwarded. Both look the same to the tools: a
//! listener that accepts with a deadline, and a stream with `Read`/`Write`
//! and timeouts.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use uroce_net::udp::{LinkTcpListener, LinkTcpStream, UdpDevice};

/// A connected out-of-band stream.
pub enum OobStream {
    /// A kernel TCP connection (UDP runtime).
    Tcp(TcpStream),
    /// A connection of the device's own stack, on its link (L2 transport).
    Link(LinkTcpStream),
}

impl OobStream {
    /// Sets how long a read or a write may wait (`None`: forever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        match self {
            OobStream::Tcp(stream) => {
                let _ = stream.set_read_timeout(timeout);
                let _ = stream.set_write_timeout(timeout);
            }
            OobStream::Link(stream) => {
                stream.set_read_timeout(timeout);
                stream.set_write_timeout(timeout);
            }
        }
    }

    /// Sets how long a read may wait (`None`: forever); writes keep
    /// theirs.
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        match self {
            OobStream::Tcp(stream) => {
                let _ = stream.set_read_timeout(timeout);
            }
            OobStream::Link(stream) => stream.set_read_timeout(timeout),
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self {
            OobStream::Tcp(stream) => stream.peer_addr().ok(),
            OobStream::Link(stream) => stream.peer_addr(),
        }
    }
}

impl Read for OobStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            OobStream::Tcp(stream) => stream.read(buf),
            OobStream::Link(stream) => stream.read(buf),
        }
    }
}

impl Write for OobStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            OobStream::Tcp(stream) => stream.write(buf),
            OobStream::Link(stream) => stream.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            OobStream::Tcp(stream) => stream.flush(),
            OobStream::Link(stream) => stream.flush(),
        }
    }
}

/// A listening out-of-band socket.
pub enum OobListener {
    /// A kernel TCP listener (UDP runtime).
    Tcp(TcpListener),
    /// A listener of the device's own stack, on its link (L2 transport).
    Link(LinkTcpListener),
}

impl OobListener {
    /// Listens on `port` (0: any, on the UDP runtime) at the device's
    /// address.
    pub fn bind(dev: &UdpDevice, port: u16) -> Result<OobListener, String> {
        if dev.is_link() {
            return dev
                .link_tcp_listen(port)
                .map(OobListener::Link)
                .map_err(|e| format!("Couldn't listen to port {port}: {e}"));
        }
        TcpListener::bind(SocketAddr::new(dev.addr(), port))
            .map(OobListener::Tcp)
            .map_err(|e| format!("Couldn't listen to port {port}: {e}"))
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        match self {
            OobListener::Tcp(listener) => listener.local_addr().map_or(0, |a| a.port()),
            OobListener::Link(listener) => listener.port(),
        }
    }

    /// Waits for one client until `deadline` (forever without one), or
    /// until `abort` is set.
    pub fn accept(
        &self,
        deadline: Option<Instant>,
        abort: &AtomicBool,
    ) -> Result<OobStream, String> {
        match self {
            OobListener::Link(listener) => match listener.accept(deadline, abort) {
                Ok(stream) => Ok(OobStream::Link(stream)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    Err("accept() failed: the run was aborted".into())
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Err("accept() failed: no client connected in time".into())
                }
                Err(e) => Err(format!("accept() failed: {e}")),
            },
            OobListener::Tcp(listener) => {
                listener.set_nonblocking(true).map_err(|e| format!("accept() failed: {e}"))?;
                loop {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            stream
                                .set_nonblocking(false)
                                .map_err(|e| format!("accept() failed: {e}"))?;
                            let _ = stream.set_nodelay(true);
                            return Ok(OobStream::Tcp(stream));
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if abort.load(Ordering::Acquire) {
                                return Err("accept() failed: the run was aborted".into());
                            }
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                return Err("accept() failed: no client connected in time".into());
                            }
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => return Err(format!("accept() failed: {e}")),
                    }
                }
            }
        }
    }
}

/// Connects to `host:port` from the device, retrying while the server is
/// not up yet, until `timeout` passes.
pub fn connect(
    dev: &UdpDevice,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<OobStream, String> {
    if dev.is_link() {
        // No resolver on the link: the peer is an address.
        let ip: IpAddr = host.parse().map_err(|_| {
            format!("Couldn't connect to {host}:{port}: over a link the peer must be an IP address")
        })?;
        return dev
            .link_tcp_connect(ip, port, timeout)
            .map(OobStream::Link)
            .map_err(|e| format!("Couldn't connect to {host}:{port}: {e}"));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("Couldn't connect to {host}:{port}: {e}"))?
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        let mut last = None;
        for addr in &addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(addr, left.max(Duration::from_millis(10))) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(OobStream::Tcp(stream));
                }
                Err(e) => last = Some(e),
            }
        }
        if Instant::now() >= deadline {
            let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
            return Err(format!("Couldn't connect to {host}:{port}: {why}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
