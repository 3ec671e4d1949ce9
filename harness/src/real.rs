//! The same node code on the real UDP runtime: [`RealEnv`] (the system
//! clock, one thread per sleep), [`TcpOob`] (length-prefixed messages over
//! TCP) and [`block_on`] (run a future on this thread, parked while it
//! waits: a completion's waker comes from the runtime's thread).

use crate::env::Env;
use crate::oob::Oob;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Runs `future` to completion on this thread, parking it while the
/// future waits (woken by the future's waker, from any thread).
pub fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark {
        thread: Thread,
        woken: AtomicBool,
    }
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.woken.store(true, Ordering::Release);
            self.thread.unpark();
        }
    }
    let unpark = Arc::new(Unpark { thread: std::thread::current(), woken: AtomicBool::new(false) });
    let waker = Waker::from(unpark.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        // park may return spuriously: wait for the flag.
        while !unpark.woken.swap(false, Ordering::AcqRel) {
            std::thread::park();
        }
    }
}

/// The real environment: [`Env::now`] since [`RealEnv::new`], sleeps on
/// a helper thread each.
#[derive(Debug, Clone, Copy)]
pub struct RealEnv {
    start: Instant,
}

impl RealEnv {
    /// An environment whose time starts now.
    pub fn new() -> RealEnv {
        RealEnv { start: Instant::now() }
    }
}

impl Default for RealEnv {
    fn default() -> RealEnv {
        RealEnv::new()
    }
}

impl Env for RealEnv {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> {
        let until = Instant::now() + d;
        let state: Arc<Mutex<(bool, Option<Waker>)>> = Arc::new(Mutex::new((false, None)));
        let mut started = false;
        poll_fn(move |cx| {
            if Instant::now() >= until {
                return Poll::Ready(());
            }
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            if s.0 {
                return Poll::Ready(());
            }
            s.1 = Some(cx.waker().clone());
            drop(s);
            if !started {
                started = true;
                let state = state.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    s.0 = true;
                    if let Some(w) = s.1.take() {
                        w.wake();
                    }
                });
            }
            Poll::Pending
        })
    }
}

#[derive(Default)]
struct Inbox {
    queue: VecDeque<Vec<u8>>,
    reader: Option<Waker>,
    /// The reader thread's end (EOF or an error).
    ended: Option<io::ErrorKind>,
}

/// [`Oob`] over a TCP connection: each message is a 4-byte big-endian
/// length and the bytes. A helper thread reads, so [`Oob::recv`] waits
/// without blocking the executor.
pub struct TcpOob {
    stream: Mutex<TcpStream>,
    inbox: Arc<Mutex<Inbox>>,
}

impl TcpOob {
    /// Connects to `addr`.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpOob> {
        TcpOob::from_stream(TcpStream::connect(addr)?)
    }

    /// Accepts one connection on `listener`.
    pub fn accept(listener: &TcpListener) -> io::Result<TcpOob> {
        TcpOob::from_stream(listener.accept()?.0)
    }

    /// Messages over `stream`.
    pub fn from_stream(stream: TcpStream) -> io::Result<TcpOob> {
        stream.set_nodelay(true)?;
        let mut reader = stream.try_clone()?;
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let theirs = inbox.clone();
        std::thread::spawn(move || loop {
            let mut len = [0u8; 4];
            let read = reader.read_exact(&mut len).and_then(|()| {
                let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
                reader.read_exact(&mut buf).map(|()| buf)
            });
            let mut inbox = theirs.lock().unwrap_or_else(|e| e.into_inner());
            let end = match read {
                Ok(message) => {
                    inbox.queue.push_back(message);
                    false
                }
                Err(e) => {
                    inbox.ended = Some(e.kind());
                    true
                }
            };
            if let Some(w) = inbox.reader.take() {
                w.wake();
            }
            if end {
                return;
            }
        });
        Ok(TcpOob { stream: Mutex::new(stream), inbox })
    }
}

impl Oob for TcpOob {
    fn send(&self, bytes: &[u8]) -> impl Future<Output = io::Result<()>> {
        let result = u32::try_from(bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message over 4 GiB"))
            .and_then(|len| {
                let mut stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
                stream.write_all(&len.to_be_bytes())?;
                stream.write_all(bytes)
            });
        std::future::ready(result)
    }

    fn recv(&self) -> impl Future<Output = io::Result<Vec<u8>>> {
        poll_fn(|cx| {
            let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(m) = inbox.queue.pop_front() {
                return Poll::Ready(Ok(m));
            }
            if let Some(kind) = inbox.ended {
                return Poll::Ready(Err(kind.into()));
            }
            inbox.reader = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

impl Drop for TcpOob {
    fn drop(&mut self) {
        // Ends the reader thread (and tells the peer): the socket is
        // shared with the reader's clone, so closing ours would not.
        let stream = self.stream.lock().unwrap_or_else(|e| e.into_inner());
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}
