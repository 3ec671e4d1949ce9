//! The driver's side of a device in another process: a [`DeviceLink`]
//! over a Unix socket, with the rings and buffers in [`SharedMemory`] the
//! device maps too.

use super::protocol::{read_frame, write_frame, FrameError, FromDevice, ToDevice};
use crate::shm::{SharedMemory, ShmError};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use uroce_device::command::{CmdError, Command, Reply};
use uroce_device::link::{DeviceLink, EventNotifier};
use uroce_device::mem::DriverMemory;
use uroce_device::{Doorbell, Event};

/// How long a command waits for the device's reply before the device is
/// taken for gone.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong reaching a device.
#[derive(Debug)]
pub enum RemoteError {
    /// The shared memory could not be made.
    Memory(ShmError),
    /// The socket failed.
    Io(std::io::Error),
    /// The device answered something other than the protocol says.
    Protocol(&'static str),
}

impl core::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RemoteError::Memory(e) => write!(f, "shared memory: {e}"),
            RemoteError::Io(e) => write!(f, "device socket: {e}"),
            RemoteError::Protocol(why) => write!(f, "device protocol: {why}"),
        }
    }
}

impl std::error::Error for RemoteError {}

/// A device in another process, as a driver reaches it. Clones share the
/// connection; when the last one goes, the socket closes and the device
/// process ends.
#[derive(Clone)]
pub struct RemoteDevice {
    inner: Arc<Inner>,
}

struct Inner {
    memory: Arc<SharedMemory>,
    /// The sending half; a command holds it until its reply is in, so
    /// replies come back in command order.
    writer: Mutex<UnixStream>,
    replies: Mutex<Receiver<Result<Reply, CmdError>>>,
    events: Arc<Mutex<VecDeque<Event>>>,
    notifiers: Arc<Mutex<Vec<EventNotifier>>>,
    closed: Arc<AtomicBool>,
    device_pid: u32,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl RemoteDevice {
    /// Connects to the device listening at `socket`, giving it
    /// `memory_bytes` of shared memory for rings and buffers.
    pub fn connect(socket: &Path, memory_bytes: u64) -> Result<RemoteDevice, RemoteError> {
        let memory = Arc::new(SharedMemory::create(memory_bytes).map_err(RemoteError::Memory)?);
        let mut stream = UnixStream::connect(socket).map_err(RemoteError::Io)?;
        // Hello, with the memfd beside it.
        let mut hello = Vec::new();
        write_frame(&mut hello, &ToDevice::Hello { addr_base: memory.addr_base() })
            .map_err(RemoteError::Io)?;
        let fds = [memory.fd()];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        let sent = rustix::net::sendmsg(
            &stream,
            &[IoSlice::new(&hello)],
            &mut control,
            rustix::net::SendFlags::NOSIGNAL,
        )
        .map_err(|e| RemoteError::Io(e.into()))?;
        if sent != hello.len() {
            return Err(RemoteError::Protocol("the hello was cut short"));
        }
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(RemoteError::Io)?;
        let device_pid = match read_frame(&mut stream) {
            Ok(FromDevice::Welcome { pid }) => pid,
            Ok(_) => return Err(RemoteError::Protocol("no welcome")),
            Err(FrameError::Io(e)) => return Err(RemoteError::Io(e)),
            Err(FrameError::Malformed) => return Err(RemoteError::Protocol("a malformed frame")),
        };
        stream.set_read_timeout(None).map_err(RemoteError::Io)?;
        let reader = stream.try_clone().map_err(RemoteError::Io)?;
        let (reply_tx, reply_rx) = mpsc::channel();
        let events = Arc::new(Mutex::new(VecDeque::new()));
        let notifiers: Arc<Mutex<Vec<EventNotifier>>> = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        {
            let (events, notifiers, closed) = (events.clone(), notifiers.clone(), closed.clone());
            std::thread::Builder::new()
                .name("uroce-remote".into())
                .spawn(move || read_loop(reader, reply_tx, &events, &notifiers, &closed))
                .map_err(RemoteError::Io)?;
        }
        Ok(RemoteDevice {
            inner: Arc::new(Inner {
                memory,
                writer: Mutex::new(stream),
                replies: Mutex::new(reply_rx),
                events,
                notifiers,
                closed,
                device_pid,
            }),
        })
    }

    /// The device's process id.
    pub fn device_pid(&self) -> u32 {
        self.inner.device_pid
    }

    /// The shared memory (rings and buffers).
    pub fn shared_memory(&self) -> &Arc<SharedMemory> {
        &self.inner.memory
    }

    fn send(&self, message: &ToDevice) -> bool {
        let mut writer = locked(&self.inner.writer);
        write_frame(&mut *writer, message).is_ok()
    }
}

/// Sorts what the device sends: replies to the waiting command, events to
/// the queue (then the notifiers, with nothing locked). Ends at the
/// device's close or a malformed frame, which closes the link.
fn read_loop(
    mut stream: UnixStream,
    replies: mpsc::Sender<Result<Reply, CmdError>>,
    events: &Mutex<VecDeque<Event>>,
    notifiers: &Mutex<Vec<EventNotifier>>,
    closed: &AtomicBool,
) {
    loop {
        match read_frame::<FromDevice>(&mut stream) {
            Ok(FromDevice::Reply(reply)) => {
                let _ = replies.send(reply.map_err(|e| e.into_cmd_error()));
            }
            Ok(FromDevice::Event(event)) => {
                locked(events).push_back(event);
                // A notifier may post or poll, which never takes this lock.
                locked(notifiers).retain(|notify| notify());
            }
            Ok(FromDevice::Welcome { .. }) | Err(_) => break,
        }
    }
    closed.store(true, Ordering::Release);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The reader thread holds its own handle: shut the socket down so
        // it (and the device) see the end.
        let _ = locked(&self.writer).shutdown(std::net::Shutdown::Both);
    }
}

impl DeviceLink for RemoteDevice {
    fn command(&self, command: Command) -> Result<Reply, CmdError> {
        let gone = CmdError::Invalid("the device is gone (its process ended)");
        if self.closed() {
            return Err(gone);
        }
        let mut writer = locked(&self.inner.writer);
        if write_frame(&mut *writer, &ToDevice::Command(command)).is_err() {
            return Err(gone);
        }
        // Still holding the writer: no other command's reply can come first.
        match locked(&self.inner.replies).recv_timeout(REPLY_TIMEOUT) {
            Ok(reply) => reply,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                self.inner.closed.store(true, Ordering::Release);
                let _ = writer.shutdown(std::net::Shutdown::Both);
                Err(gone)
            }
        }
    }

    fn kick(&self, doorbell: Doorbell) {
        if !self.send(&ToDevice::Kick(doorbell)) {
            self.inner.closed.store(true, Ordering::Release);
        }
    }

    fn poll_event(&self) -> Option<Event> {
        locked(&self.inner.events).pop_front()
    }

    fn on_events(&self, notify: EventNotifier) {
        locked(&self.inner.notifiers).push(notify);
    }

    fn memory(&self) -> Arc<dyn DriverMemory> {
        self.inner.memory.clone()
    }

    fn closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}
