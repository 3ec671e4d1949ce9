//! Two CM engines wired together through a tiny simulated network with
//! virtual time, a fault hook and an optional automatic consumer.

#![allow(dead_code)]

use uroce_cm::{
    AcceptParams, Cm, CmConfig, CmId, ConnectParams, Event, Peer, SidrReplyParams, NS_PER_MS,
};
use uroce_wire::mad::sidr::SidrStatus;
use uroce_wire::mad::{self, AttributeId, CmMessage, Gid, Guid, ServiceId, MAD_LEN};
use uroce_wire::{Psn, Qkey, Qpn};

pub const A_GID: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]);
pub const B_GID: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
pub const EVIL_GID: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 66]);
pub const SERVICE: ServiceId = ServiceId(0x0000_0000_0106_4e20);
pub const A_QPN: Qpn = Qpn::new(0x11);
pub const B_QPN: Qpn = Qpn::new(0x22);
pub const SIDR_QPN: Qpn = Qpn::new(0x33);
pub const SIDR_QKEY: Qkey = Qkey(0x1234_5678);
/// One-way delay of the network.
pub const LATENCY_NS: u64 = 10_000;
pub const MS: u64 = NS_PER_MS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    A,
    B,
}

/// What the automatic consumer does with each event.
#[derive(Debug, Clone, Copy)]
pub struct Auto {
    pub accept: bool,
    pub rtu: bool,
    pub sidr_reply: bool,
}

pub struct Side {
    pub cm: Cm,
    pub gid: Gid,
    pub auto: Auto,
    /// Every event with the time it was polled.
    pub events: Vec<(u64, Event)>,
}

impl Side {
    pub fn peer(&self) -> Peer {
        Peer { gid: self.gid, pkey_index: 0 }
    }
    pub fn count(&self, f: impl Fn(&Event) -> bool) -> usize {
        self.events.iter().filter(|(_, e)| f(e)).count()
    }
    pub fn last(&self) -> Option<&Event> {
        self.events.last().map(|(_, e)| e)
    }
}

/// Decides what becomes of a MAD sent by `from` (its attribute, and how
/// many of that attribute `from` has sent so far, this one included):
/// one delay per copy delivered (empty: lost).
pub type Fault = Box<dyn FnMut(Who, AttributeId, u32) -> Vec<u64>>;

struct Flight {
    at: u64,
    seq: u64,
    to: Who,
    from: Peer,
    mad: Box<[u8; MAD_LEN]>,
}

pub struct World {
    pub a: Side,
    pub b: Side,
    pub now: u64,
    pub fault: Fault,
    /// Every MAD sent: time, sender, attribute, bytes.
    pub sent: Vec<(u64, Who, AttributeId, Box<[u8; MAD_LEN]>)>,
    flight: Vec<Flight>,
    seq: u64,
    counts: Vec<(Who, u16, u32)>,
}

pub fn config(guid: u64, seed: u64) -> CmConfig {
    CmConfig::new(Guid(guid), seed)
}

pub fn attribute(mad: &[u8]) -> AttributeId {
    mad::Repr::parse(&mad::Packet::new_checked(mad).unwrap()).unwrap().attribute_id
}

pub fn tid(mad: &[u8]) -> mad::TransactionId {
    mad::Repr::parse(&mad::Packet::new_checked(mad).unwrap()).unwrap().transaction_id
}

pub fn message(mad: &[u8]) -> CmMessage {
    CmMessage::parse(&mad::Packet::new_checked(mad).unwrap()).unwrap()
}

impl World {
    pub fn new() -> World {
        let auto = Auto { accept: true, rtu: true, sidr_reply: true };
        World {
            a: Side { cm: Cm::new(config(0xa, 1)), gid: A_GID, auto, events: Vec::new() },
            b: Side { cm: Cm::new(config(0xb, 2)), gid: B_GID, auto, events: Vec::new() },
            now: 1_000 * MS,
            fault: Box::new(|_, _, _| vec![LATENCY_NS]),
            sent: Vec::new(),
            flight: Vec::new(),
            seq: 0,
            counts: Vec::new(),
        }
    }

    /// A world whose B listens on [`SERVICE`].
    pub fn listening() -> World {
        let mut w = World::new();
        w.b.cm.listen(SERVICE).unwrap();
        w
    }

    pub fn side(&mut self, who: Who) -> &mut Side {
        match who {
            Who::A => &mut self.a,
            Who::B => &mut self.b,
        }
    }

    pub fn connect_params() -> ConnectParams {
        ConnectParams::rdma_cm(A_GID, B_GID, SERVICE, A_QPN, Psn::new(0x111))
    }

    /// A connects to B's [`SERVICE`].
    pub fn connect(&mut self) -> CmId {
        let now = self.now;
        self.a.cm.connect(now, &Self::connect_params(), b"hello").unwrap()
    }

    /// Delivers a MAD to `to` as if it came from `from` now.
    pub fn inject(&mut self, to: Who, from: Gid, mad: &[u8]) {
        let now = self.now;
        self.side(to).cm.receive(now, Peer { gid: from, pkey_index: 0 }, mad);
        self.pump();
    }

    /// Moves transmits into the network and events into the logs,
    /// answering them if the side's consumer is automatic.
    pub fn pump(&mut self) {
        loop {
            let mut progress = false;
            for who in [Who::A, Who::B] {
                while let Some(t) = self.side(who).cm.poll_transmit() {
                    progress = true;
                    assert_eq!(t.dest_qpn, Qpn::GSI);
                    let attr = attribute(&t.mad[..]);
                    let n = match self.counts.iter_mut().find(|(w, a, _)| *w == who && *a == attr.0)
                    {
                        Some(entry) => {
                            entry.2 += 1;
                            entry.2
                        }
                        None => {
                            self.counts.push((who, attr.0, 1));
                            1
                        }
                    };
                    self.sent.push((self.now, who, attr, t.mad.clone()));
                    let to = if who == Who::A { Who::B } else { Who::A };
                    let from = Peer { gid: self.side(who).gid, pkey_index: 0 };
                    assert_eq!(t.peer.gid, self.side(to).gid, "sent to the wrong GID");
                    for delay in (self.fault)(who, attr, n) {
                        self.seq += 1;
                        self.flight.push(Flight {
                            at: self.now + delay,
                            seq: self.seq,
                            to,
                            from,
                            mad: t.mad.clone(),
                        });
                    }
                }
                while let Some(e) = self.side(who).cm.poll_event() {
                    progress = true;
                    let now = self.now;
                    let side = self.side(who);
                    side.events.push((now, e.clone()));
                    match e {
                        Event::ConnectRequest { id, .. } if side.auto.accept => {
                            side.cm
                                .accept(
                                    now,
                                    id,
                                    &AcceptParams::new(B_QPN, Psn::new(0x222)),
                                    b"welcome",
                                )
                                .unwrap();
                        }
                        Event::ConnectReply { id, .. } if side.auto.rtu => {
                            side.cm.ready_to_use(now, id, &[]).unwrap();
                        }
                        Event::SidrRequest { id, .. } if side.auto.sidr_reply => {
                            let reply = SidrReplyParams {
                                status: SidrStatus::Success,
                                qpn: SIDR_QPN,
                                qkey: SIDR_QKEY,
                            };
                            side.cm.sidr_reply(now, id, &reply, b"udp").unwrap();
                        }
                        _ => {}
                    }
                }
            }
            if !progress {
                break;
            }
        }
    }

    /// The next time something happens: a delivery or a deadline.
    fn next_time(&self) -> Option<u64> {
        let flight = self.flight.iter().map(|f| f.at).min();
        [flight, self.a.cm.poll_timeout(), self.b.cm.poll_timeout()].into_iter().flatten().min()
    }

    /// Runs until nothing is left to happen or `limit_ns` from now.
    pub fn run_for(&mut self, limit_ns: u64) {
        let end = self.now + limit_ns;
        self.pump();
        while let Some(t) = self.next_time() {
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            self.flight.sort_by_key(|f| (f.at, f.seq));
            while self.flight.first().is_some_and(|f| f.at <= self.now) {
                let f = self.flight.remove(0);
                let now = self.now;
                self.side(f.to).cm.receive(now, f.from, &f.mad[..]);
                self.pump();
            }
            let now = self.now;
            self.a.cm.handle_timeout(now);
            self.b.cm.handle_timeout(now);
            self.pump();
        }
        self.now = self.now.max(end);
    }

    /// Runs until quiet (at most ten virtual minutes).
    pub fn run(&mut self) {
        self.run_for(600_000 * MS);
    }

    pub fn is_quiet(&self) -> bool {
        self.next_time().is_none()
    }

    /// How many MADs of `attr` `who` sent.
    pub fn sent_count(&self, who: Who, attr: AttributeId) -> usize {
        self.sent.iter().filter(|(_, w, a, _)| *w == who && *a == attr).count()
    }

    pub fn sent_of(&self, who: Who, attr: AttributeId) -> Vec<(u64, Box<[u8; MAD_LEN]>)> {
        self.sent
            .iter()
            .filter(|(_, w, a, _)| *w == who && *a == attr)
            .map(|(t, _, _, m)| (*t, m.clone()))
            .collect()
    }
}

/// The CM ID of the first event of a kind on a side.
pub fn first_id(side: &Side, f: impl Fn(&Event) -> bool) -> CmId {
    side.events.iter().find(|(_, e)| f(e)).map(|(_, e)| e.id()).expect("no such event")
}

pub fn is_established(e: &Event) -> bool {
    matches!(e, Event::Established { .. })
}
pub fn is_request(e: &Event) -> bool {
    matches!(e, Event::ConnectRequest { .. })
}
pub fn is_reply(e: &Event) -> bool {
    matches!(e, Event::ConnectReply { .. })
}
pub fn is_disconnected(e: &Event) -> bool {
    matches!(e, Event::Disconnected { .. })
}
pub fn is_timewait_exit(e: &Event) -> bool {
    matches!(e, Event::TimewaitExit { .. })
}

/// The 256 bytes of a MAD carrying `message` with `tid`.
pub fn mad_of(tid: mad::TransactionId, message: &CmMessage) -> Vec<u8> {
    let mut buf = vec![0u8; MAD_LEN];
    let mut p = mad::Packet::new_unchecked(&mut buf[..]);
    mad::Repr::cm(tid, message.attribute_id()).emit(&mut p);
    message.emit(&mut p).unwrap();
    buf
}

/// A world where A and B are connected; their CM IDs.
pub fn established() -> (World, CmId, CmId) {
    let mut w = World::listening();
    let a_id = w.connect();
    w.run_for(100 * MS);
    let b_id = first_id(&w.b, is_request);
    assert!(w.a.cm.state(a_id) == Some(uroce_cm::State::Established));
    assert!(w.b.cm.state(b_id) == Some(uroce_cm::State::Established));
    (w, a_id, b_id)
}
