//! The device's side: an HCA in its own process, serving one driver over
//! a Unix socket, reaching the driver's rings and buffers through its own
//! mapping of the driver's memfd.
//!
//! The HCA's packets go to its own addresses only (a loopback port): two
//! QPs of the device talk to each other, which is what a test of the seam
//! needs; a network port is the real runtime's business.

use super::protocol::{read_frame, write_frame, FrameError, FromDevice, ToDevice};
use crate::shm::SharedView;
use core::net::IpAddr;
use std::io::IoSliceMut;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;
use uroce_device::command::Gid;
use uroce_hca::config::HcaConfig;
use uroce_hca::endpoint::MAX_PACKET_LEN;
use uroce_hca::{Endpoint, Hca, Instant};

/// The longest the device sleeps with nothing to do before it looks again.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// Packets moved per round before the socket is looked at again.
const PACKETS_PER_ROUND: usize = 256;

/// How a served device is set up.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The device's address (its GID 1; GID 0 is the link-local one).
    pub addr: IpAddr,
    /// The HCA's limits and behaviour.
    pub hca: HcaConfig,
}

/// Why serving ended other than by the driver's close.
#[derive(Debug)]
pub enum ServeError {
    /// The socket failed.
    Io(std::io::Error),
    /// The driver broke the protocol (no hello, no memfd, a malformed
    /// frame, memory that does not map).
    Protocol(String),
}

impl core::fmt::Display for ServeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ServeError::Io(e) => write!(f, "device socket: {e}"),
            ServeError::Protocol(why) => write!(f, "driver broke the protocol: {why}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Accepts one driver on `listener` and serves it until it closes.
pub fn serve_one(listener: &UnixListener, config: &ServeConfig) -> Result<(), ServeError> {
    let (stream, _) = listener.accept().map_err(ServeError::Io)?;
    serve(stream, config)
}

/// Serves the driver on `stream` until it closes: the hello and its memfd,
/// then commands, kicks and the HCA's own work, until end of stream.
pub fn serve(mut stream: UnixStream, config: &ServeConfig) -> Result<(), ServeError> {
    let memory = Arc::new(receive_hello(&stream)?);
    write_frame(&mut stream, &FromDevice::Welcome { pid: std::process::id() })
        .map_err(ServeError::Io)?;
    let mac = [0x02, 0, 0, 0, 0, 1];
    let gids = vec![Gid::link_local_from_mac(mac), Gid::from_ip(config.addr)];
    let mut hca_config = config.hca.clone();
    if hca_config.cm_seed == 0 {
        // As a device in the application's process (`UdpDevice::open`).
        hca_config.cm_seed = crate::udp::random_seed();
    }
    let mut hca = Hca::new(hca_config, gids, memory)
        .map_err(|e| ServeError::Protocol(format!("HCA configuration: {e}")))?;
    let clock = std::time::Instant::now();
    let now = || Instant::from_nanos(clock.elapsed().as_nanos() as u64);
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let mut looped = Vec::new();
    loop {
        let busy = run_round(&mut hca, now(), &mut buf, &mut looped);
        send_events(&mut hca, &mut stream)?;
        let wait = if busy {
            Duration::ZERO
        } else {
            let until = hca.poll_timeout().map(|t| t.nanos_since(now()));
            Duration::from_nanos(until.unwrap_or(u64::MAX)).min(IDLE_WAIT)
        };
        if !readable(&stream, wait)? {
            continue;
        }
        match read_frame::<ToDevice>(&mut stream) {
            Ok(ToDevice::Command(command)) => {
                let reply = hca.command(now(), command).map_err(Into::into);
                write_frame(&mut stream, &FromDevice::Reply(reply)).map_err(ServeError::Io)?;
            }
            Ok(ToDevice::Kick(doorbell)) => hca.doorbell(now(), doorbell),
            Ok(ToDevice::Hello { .. }) => {
                return Err(ServeError::Protocol("a second hello".into()))
            }
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(());
            }
            Err(FrameError::Io(e)) => return Err(ServeError::Io(e)),
            Err(FrameError::Malformed) => {
                return Err(ServeError::Protocol("a malformed frame".into()));
            }
        }
    }
}

/// Reads the hello and maps the memfd that came with it.
fn receive_hello(stream: &UnixStream) -> Result<SharedView, ServeError> {
    let mut bytes = vec![0u8; 64];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        rustix::net::RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| ServeError::Io(e.into()))?;
    let mut fd = None;
    for message in control.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = message {
            for received in fds {
                // The first is the memfd; any other is closed as it drops.
                fd.get_or_insert(received);
            }
        }
    }
    let fd = fd.ok_or_else(|| ServeError::Protocol("no memfd with the hello".into()))?;
    let hello: ToDevice = read_frame(&mut &bytes[..got.bytes])
        .map_err(|_| ServeError::Protocol("a malformed hello".into()))?;
    let ToDevice::Hello { addr_base } = hello else {
        return Err(ServeError::Protocol("no hello first".into()));
    };
    SharedView::map(fd, addr_base).map_err(|e| ServeError::Protocol(e.to_string()))
}

/// Fires due timers and moves packets: every packet the HCA sends goes
/// back into it (its own addresses, and multicast groups), others are
/// dropped. Returns whether
/// anything moved (so the next round comes at once).
fn run_round(hca: &mut Hca, now: Instant, buf: &mut [u8], looped: &mut Vec<Vec<u8>>) -> bool {
    if hca.poll_timeout().is_some_and(|t| t <= now) {
        hca.handle_timeout(now);
    }
    let mut moved = false;
    for _ in 0..PACKETS_PER_ROUND {
        let Some(transmit) = hca.poll_transmit(now, buf) else { break };
        // A multicast packet comes back too, as the kernel loops one back
        // to its host: the device's own attached QPs take it.
        let to = transmit.destination;
        if to.is_multicast() || hca.addresses().contains(&to) {
            looped.push(buf[..transmit.len].to_vec());
        }
        moved = true;
    }
    for packet in looped.drain(..) {
        hca.receive(now, &packet);
        moved = true;
    }
    moved
}

fn send_events(hca: &mut Hca, stream: &mut UnixStream) -> Result<(), ServeError> {
    while let Some(event) = hca.poll_event() {
        write_frame(stream, &FromDevice::Event(event)).map_err(ServeError::Io)?;
    }
    Ok(())
}

/// Waits up to `wait` for the driver to send something.
fn readable(stream: &UnixStream, wait: Duration) -> Result<bool, ServeError> {
    let mut fds = [rustix::event::PollFd::new(stream, rustix::event::PollFlags::IN)];
    let timeout = rustix::time::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(ServeError::Io(e.into())),
    }
}
