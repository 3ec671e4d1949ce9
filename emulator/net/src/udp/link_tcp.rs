//! The L2 transport's TCP: the tools' out-of-band exchange (QP numbers,
//! PSNs, keys) on the same link as the RoCE frames, through the link
//! host's smoltcp stack. A device on a link has no kernel stack behind its
//! address, so this is how `uroce pingpong` talks to an unmodified
//! `ibv_rc_pingpong` in a VM with nothing forwarded.
//!
//! The surface is std's: a listener that accepts one connection at a time
//! and a stream with `Read`/`Write` and timeouts. Waiting moves the device
//! (the caller's thread receives and sends), so a stream works whether or
//! not the background thread is in charge.

use super::progress::Runtime;
use super::{lock, UdpDevice};
use crate::link::LinkHost;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::State;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest one wait for the link's socket lasts before the caller
/// looks at its condition again (another thread may have moved the frame).
const WAIT_SLICE_NS: u64 = 1_000_000;
/// The first pause after a refused connect, doubled up to a second.
const CONNECT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a listener waits for a handshake it answered to complete
/// before it listens afresh: one peer that sent a SYN and went away (or a
/// spoofed SYN) must not block the only listening socket.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(5);
/// How long dropping a stream waits for the peer to acknowledge what was
/// written (the process may exit right after, and nothing would resend).
const DROP_LINGER: Duration = Duration::from_secs(1);

/// `timeout` from now; `None` (no deadline) when that is beyond what an
/// `Instant` holds.
fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

fn not_link() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "the device is not on the L2 transport")
}

impl UdpDevice {
    /// Listens on TCP `port` at the device's address, on its link.
    pub fn link_tcp_listen(&self, port: u16) -> io::Result<LinkTcpListener> {
        let handle = {
            let mut io = lock(&self.runtime.io);
            let link = io.transport.host().ok_or_else(not_link)?;
            link.tcp_listen(port).map_err(io::Error::other)?
        };
        Ok(LinkTcpListener { runtime: self.runtime.clone(), port, handle: Mutex::new(handle) })
    }

    /// Connects to `remote:port` over the link, retrying (with backoff)
    /// while the peer refuses, until `timeout` passes.
    pub fn link_tcp_connect(
        &self,
        remote: IpAddr,
        port: u16,
        timeout: Duration,
    ) -> io::Result<LinkTcpStream> {
        let runtime = &self.runtime;
        let deadline = deadline_after(timeout);
        let mut backoff = CONNECT_BACKOFF;
        loop {
            let local_port = 49152 + (super::random_seed() % 16384) as u16;
            let handle = {
                let mut io = lock(&runtime.io);
                let link = io.transport.host().ok_or_else(not_link)?;
                link.tcp_connect(remote, port, local_port).map_err(io::Error::other)?
            };
            let established = runtime.link_wait(deadline, |link| {
                match link.tcp(handle).state() {
                    State::Established | State::CloseWait => Some(Ok(true)),
                    // Refused (RST) or given up.
                    State::Closed => Some(Ok(false)),
                    _ => None,
                }
            });
            match established {
                Ok(true) => return Ok(LinkTcpStream::new(runtime.clone(), handle)),
                Ok(false) => runtime.link_remove(handle),
                Err(e) => {
                    runtime.link_remove(handle);
                    if e.kind() == io::ErrorKind::WouldBlock {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("no answer from {remote}:{port} over the link"),
                        ));
                    }
                    return Err(e);
                }
            }
            if deadline.is_some_and(|d| Instant::now() + backoff >= d) {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("{remote}:{port} refused the connection over the link"),
                ));
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
}

impl Runtime {
    /// Asks `attempt` until it answers or `deadline` passes (then
    /// `WouldBlock`, as a std socket's timeout), moving the device in
    /// between. Frames the answer queued (data, ACKs, a FIN) leave at once.
    fn link_wait<T>(
        &self,
        deadline: Option<Instant>,
        mut attempt: impl FnMut(&mut LinkHost) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        loop {
            {
                let mut io = lock(&self.io);
                let link = io.transport.host().ok_or_else(not_link)?;
                if let Some(answer) = attempt(link) {
                    let now_ns = self.now_ns();
                    self.queue_link_frames(&mut io, now_ns);
                    self.flush_batch(&mut io);
                    return answer;
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.progress_by(false);
            self.wait_socket(WAIT_SLICE_NS);
        }
    }

    /// Sleeps until the link's socket is readable or `timeout_ns` passes
    /// (never touching the background thread's wake-up descriptor).
    fn wait_socket(&self, timeout_ns: u64) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let timeout = Timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as _,
            tv_nsec: (timeout_ns % 1_000_000_000) as _,
        };
        let mut fds = [PollFd::from_borrowed_fd(self.ready_fd.as_fd(), PollFlags::IN)];
        let _ = poll(&mut fds, Some(&timeout));
    }

    /// Drops a TCP socket now (aborting it).
    fn link_remove(&self, handle: SocketHandle) {
        let mut io = lock(&self.io);
        if let Some(link) = io.transport.host() {
            link.tcp_remove(handle);
        }
        let now_ns = self.now_ns();
        self.queue_link_frames(&mut io, now_ns);
        self.flush_batch(&mut io);
    }
}

/// A TCP listener on the link (see [`UdpDevice::link_tcp_listen`]).
pub struct LinkTcpListener {
    runtime: Arc<Runtime>,
    port: u16,
    /// The listening socket: it becomes the accepted connection, and a
    /// fresh one listens in its place.
    handle: Mutex<SocketHandle>,
}

impl core::fmt::Debug for LinkTcpListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkTcpListener").field("port", &self.port).finish()
    }
}

impl LinkTcpListener {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for a connection until `deadline` (forever without one) or
    /// until `abort` is set (`Interrupted`).
    pub fn accept(
        &self,
        deadline: Option<Instant>,
        abort: &AtomicBool,
    ) -> io::Result<LinkTcpStream> {
        let mut handle = lock(&self.handle);
        let listening = *handle;
        let port = self.port;
        let mut handshake_since: Option<Instant> = None;
        self.runtime.link_wait(deadline, |link| {
            if abort.load(Ordering::Acquire) {
                return Some(Err(io::ErrorKind::Interrupted.into()));
            }
            let socket = link.tcp(listening);
            match socket.state() {
                State::Established | State::CloseWait => return Some(Ok(())),
                State::Listen => handshake_since = None,
                State::SynReceived => {
                    let since = *handshake_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= HANDSHAKE_LIMIT {
                        socket.abort();
                    }
                }
                // Reset (or closed) before this call saw it established:
                // the connection is gone, listen again.
                _ => socket.abort(),
            }
            if !socket.is_open() {
                handshake_since = None;
                if let Err(e) = socket.listen(port) {
                    return Some(Err(io::Error::other(e.to_string())));
                }
            }
            None
        })?;
        let fresh = {
            let mut io = lock(&self.runtime.io);
            let link = io.transport.host().ok_or_else(not_link)?;
            link.tcp_listen(self.port).map_err(io::Error::other)?
        };
        *handle = fresh;
        Ok(LinkTcpStream::new(self.runtime.clone(), listening))
    }
}

impl Drop for LinkTcpListener {
    fn drop(&mut self) {
        let handle = *lock(&self.handle);
        self.runtime.link_remove(handle);
    }
}

/// A TCP connection on the link: `Read` and `Write` as a std `TcpStream`
/// (a timed-out read or write fails with `WouldBlock`).
pub struct LinkTcpStream {
    runtime: Arc<Runtime>,
    handle: SocketHandle,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl core::fmt::Debug for LinkTcpStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LinkTcpStream").field("peer", &self.peer_addr()).finish()
    }
}

impl LinkTcpStream {
    fn new(runtime: Arc<Runtime>, handle: SocketHandle) -> LinkTcpStream {
        LinkTcpStream { runtime, handle, read_timeout: None, write_timeout: None }
    }

    /// How long a read may wait (`None`: forever).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) {
        self.read_timeout = timeout;
    }

    /// How long a write may wait for room (`None`: forever).
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) {
        self.write_timeout = timeout;
    }

    /// The peer's address and port.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        let mut io = lock(&self.runtime.io);
        let endpoint = io.transport.host()?.tcp(self.handle).remote_endpoint()?;
        Some(SocketAddr::new(endpoint.addr.into(), endpoint.port))
    }
}

impl Read for LinkTcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.read_timeout.and_then(deadline_after);
        let handle = self.handle;
        self.runtime.link_wait(deadline, |link| {
            let socket = link.tcp(handle);
            if socket.can_recv() {
                return Some(socket.recv_slice(buf).map_err(|e| io::Error::other(e.to_string())));
            }
            // The peer's FIN (or a reset): end of stream.
            (!socket.may_recv()).then_some(Ok(0))
        })
    }
}

impl Write for LinkTcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.write_timeout.and_then(deadline_after);
        let handle = self.handle;
        self.runtime.link_wait(deadline, |link| {
            let socket = link.tcp(handle);
            if !socket.may_send() {
                return Some(Err(io::ErrorKind::BrokenPipe.into()));
            }
            socket
                .can_send()
                .then(|| socket.send_slice(buf).map_err(|e| io::Error::other(e.to_string())))
        })
    }

    /// As a std `TcpStream`'s: nothing to do (a write has handed its bytes
    /// to the stack, which sends them at once). Dropping the stream waits
    /// (briefly) for the peer's acknowledgement.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LinkTcpStream {
    /// Waits until nothing written waits for the peer's acknowledgement
    /// (or the connection cannot send any more).
    fn wait_acknowledged(&self, deadline: Option<Instant>) -> io::Result<()> {
        let handle = self.handle;
        self.runtime.link_wait(deadline, |link| {
            let socket = link.tcp(handle);
            (socket.send_queue() == 0 || !socket.may_send()).then_some(Ok(()))
        })
    }
}

impl Drop for LinkTcpStream {
    fn drop(&mut self) {
        // What was written reaches the peer before the FIN goes, even when
        // the process exits next (bounded: the peer may be gone).
        let _ = self.wait_acknowledged(deadline_after(DROP_LINGER));
        let mut io = lock(&self.runtime.io);
        if let Some(link) = io.transport.host() {
            link.tcp_release(self.handle);
        }
        let now_ns = self.runtime.now_ns();
        self.runtime.queue_link_frames(&mut io, now_ns);
        self.runtime.flush_batch(&mut io);
    }
}
