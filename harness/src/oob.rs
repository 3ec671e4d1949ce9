//! The side channel node tasks exchange connection details over
//! (QPN, PSN, GID, rkeys): [`Oob`], and its simulated implementation
//! [`SimOob`] (the real one is [`crate::real::TcpOob`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// A reliable, ordered message channel to one peer, outside the RDMA
/// fabric (the TCP socket of `ibv_rc_pingpong`). Messages keep their
/// boundaries.
pub trait Oob {
    /// Sends one message.
    fn send(&self, bytes: &[u8]) -> impl Future<Output = io::Result<()>>;
    /// The next message; `UnexpectedEof` once the peer is gone and
    /// everything it sent was read.
    fn recv(&self) -> impl Future<Output = io::Result<Vec<u8>>>;
}

#[derive(Default)]
struct Pipe {
    queue: VecDeque<Vec<u8>>,
    reader: Option<Waker>,
    closed: bool,
}

/// One end of [`crate::Sim::oob_pair`]: lossless and instantaneous in
/// virtual time (a message sent is readable at once), outside the fabric
/// (no scenario or fault touches it, the trace does not see it).
pub struct SimOob {
    tx: Rc<RefCell<Pipe>>,
    rx: Rc<RefCell<Pipe>>,
}

/// Two connected ends.
pub(crate) fn pair() -> (SimOob, SimOob) {
    let (ab, ba) = (Rc::new(RefCell::new(Pipe::default())), Rc::new(RefCell::new(Pipe::default())));
    (SimOob { tx: ab.clone(), rx: ba.clone() }, SimOob { tx: ba, rx: ab })
}

impl Oob for SimOob {
    fn send(&self, bytes: &[u8]) -> impl Future<Output = io::Result<()>> {
        let mut pipe = self.tx.borrow_mut();
        pipe.queue.push_back(bytes.to_vec());
        if let Some(w) = pipe.reader.take() {
            w.wake();
        }
        std::future::ready(Ok(()))
    }

    fn recv(&self) -> impl Future<Output = io::Result<Vec<u8>>> {
        poll_fn(|cx| {
            let mut pipe = self.rx.borrow_mut();
            if let Some(m) = pipe.queue.pop_front() {
                return Poll::Ready(Ok(m));
            }
            if pipe.closed {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            pipe.reader = Some(cx.waker().clone());
            Poll::Pending
        })
    }
}

impl Drop for SimOob {
    fn drop(&mut self) {
        let mut pipe = self.tx.borrow_mut();
        pipe.closed = true;
        if let Some(w) = pipe.reader.take() {
            w.wake();
        }
    }
}
