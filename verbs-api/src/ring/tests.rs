//! The driver's rings' tests: work-ring posts, completion-ring polls,
//! discards and resizes.

use super::*;
use uroce_device::mem::SimMemory;
use uroce_device::types::{WcOpcode, WcStatus};

fn ring(host: &SimMemory, entries: u32, stride: u32) -> RingDesc {
    let shape = RingDesc { base: 0, entries, stride };
    let base = crate::ring_pool::RingPool::default().allocate(host, shape.bytes()).unwrap();
    RingDesc { base, ..shape }
}

fn index(host: &SimMemory, ring: RingDesc, offset: u64) -> u32 {
    load(host, ring, offset).unwrap()
}

/// Writes the item into its slot's first byte; a zero is refused.
fn fill_nonzero(item: &u8, slot: &mut [u8]) -> Result<()> {
    if *item == 0 {
        return Err(Error::Invalid("zero"));
    }
    slot[0] = *item;
    Ok(())
}

#[test]
fn a_chain_is_published_once_up_to_the_failing_item() {
    let host = SimMemory::strict(1 << 20);
    let sq = WorkRing::new(ring(&host, 8, 32), 8, "full");
    let fill = fill_nonzero;
    assert_eq!(sq.post_chain(&host, &[1, 2], fill), (2, Ok(())));
    assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 2);
    let (posted, result) = sq.post_chain(&host, &[3, 0, 4], fill);
    assert_eq!((posted, result), (1, Err((1, Error::Invalid("zero")))));
    assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 3, "the WR before the bad one");
    let mut entry = [0u8; 32];
    host.read(sq.desc.entry_addr(2), &mut entry).unwrap();
    assert_eq!(entry[0], 3);
    assert_eq!(sq.post_chain(&host, &[0], fill), (0, Err((0, Error::Invalid("zero")))));
    assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 3);
}

#[test]
fn a_full_ring_refuses_until_the_consumer_moves() {
    let host = SimMemory::strict(1 << 20);
    let rq = WorkRing::new(ring(&host, 4, 32), 3, "receive queue full");
    let fill = |_: &u8, _: &mut [u8]| Ok(());
    let (posted, result) = rq.post_chain(&host, &[0; 5], fill);
    assert_eq!((posted, result), (3, Err((3, Error::NoMemory("receive queue full")))));
    // The HCA consumes two: the driver sees it when it next looks.
    publish(&host, rq.desc, CONSUMER_OFFSET, 2).unwrap();
    assert_eq!(rq.post_chain(&host, &[0; 3], fill).0, 2);
    assert_eq!(index(&host, rq.desc, PRODUCER_OFFSET), 5);
    rq.reset(&host).unwrap();
    assert_eq!(index(&host, rq.desc, PRODUCER_OFFSET), 0);
    assert_eq!(index(&host, rq.desc, CONSUMER_OFFSET), 0);
    assert_eq!(rq.post_chain(&host, &[0; 4], fill).0, 3, "empty again after a reset");
}

#[test]
fn each_wqe_gets_a_zeroed_slot_across_the_wrap() {
    let host = SimMemory::strict(1 << 20);
    let srq = WorkRing::new(ring(&host, 2, 16), 2, "full");
    for round in 0..5u8 {
        let used = usize::from(16 - round);
        let fill = |_: &u8, slot: &mut [u8]| {
            slot[..used].fill(round + 1);
            Ok(())
        };
        assert_eq!(srq.post_chain(&host, &[0], fill), (1, Ok(())));
        let mut entry = [0xffu8; 16];
        host.read(srq.desc.entry_addr(u32::from(round)), &mut entry).unwrap();
        assert!(entry[..used].iter().all(|&b| b == round + 1));
        assert!(entry[used..].iter().all(|&b| b == 0), "the rest of the slot is zero");
        publish(&host, srq.desc, CONSUMER_OFFSET, u32::from(round) + 1).unwrap();
    }
}

/// What one poll of up to `max` takes.
fn polled(cq: &CqRing, host: &SimMemory, max: usize) -> Vec<Cqe> {
    let mut out = Vec::new();
    let taken = cq.poll_into(host, max, &mut out).unwrap();
    assert_eq!(taken, out.len());
    out
}

#[test]
fn the_lockless_look_sees_new_completions_a_resize_and_reports_faults() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
    assert!(polled(&cq, &host, 8).is_empty());
    let write = |cq: &CqRing, n: u32| {
        let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Recv, Qpn::new(16));
        host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
        publish(&host, cq.desc(), PRODUCER_OFFSET, n + 1).unwrap();
    };
    write(&cq, 0);
    assert_eq!(polled(&cq, &host, 8).len(), 1, "seen past the empty look");
    assert!(polled(&cq, &host, 8).is_empty(), "consumed: empty again");
    // A resize starts a new ring at index 0: the look follows it.
    let bigger = ring(&host, 8, CQE_LEN as u32);
    cq.resize(&host, 8, || Ok(bigger)).unwrap();
    assert!(polled(&cq, &host, 8).is_empty());
    write(&cq, 0);
    assert_eq!(polled(&cq, &host, 8).len(), 1, "the new ring's first completion");
    // A ring whose index cannot be read is not empty: the poll fails.
    let lenient = SimMemory::new(1 << 20);
    let lost = CqRing::new(RingDesc { base: 1 << 40, entries: 4, stride: CQE_LEN as u32 });
    assert!(lost.poll_into(&lenient, 8, &mut Vec::new()).is_err());
    assert_eq!(lenient.faults(), 2, "looked at without, then with the lock");
}

#[test]
fn a_poll_appends_and_a_corrupt_cqe_leaves_the_buffer_and_the_ring_as_they_were() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
    let cqe = Cqe::new(7, WcStatus::Success, WcOpcode::Send, Qpn::new(16));
    host.write(cq.desc().entry_addr(0), &cqe.encode()).unwrap();
    host.write(cq.desc().entry_addr(1), &[0xff; CQE_LEN]).unwrap();
    publish(&host, cq.desc(), PRODUCER_OFFSET, 2).unwrap();
    let mut out = vec![Cqe::new(1, WcStatus::Success, WcOpcode::Recv, Qpn::new(16))];
    assert!(cq.poll_into(&host, 4, &mut out).is_err(), "the second CQE does not decode");
    assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1], "as it was");
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 0, "nothing consumed");
    assert_eq!(cq.poll_into(&host, 1, &mut out).unwrap(), 1);
    assert_eq!(out.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1, 7], "appended");
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 1);
}

#[test]
fn a_chain_across_the_ring_end_lands_in_order() {
    let host = SimMemory::strict(1 << 20);
    let sq = WorkRing::new(ring(&host, 4, 16), 4, "full");
    let fill = fill_nonzero;
    assert_eq!(sq.post_chain(&host, &[1, 2], fill), (2, Ok(())));
    publish(&host, sq.desc, CONSUMER_OFFSET, 2).unwrap();
    // Slots 2 and 3, then 0 after the wrap; the fourth item is refused,
    // and slot 1 keeps the first post's WQE.
    let (posted, result) = sq.post_chain(&host, &[3, 4, 5, 0, 6], fill);
    assert_eq!((posted, result), (3, Err((3, Error::Invalid("zero")))));
    assert_eq!(index(&host, sq.desc, PRODUCER_OFFSET), 5);
    for (slot, expected) in [(2u32, 3u8), (3, 4), (0, 5), (1, 2)] {
        let mut entry = [0xffu8; 16];
        host.read(sq.desc.entry_addr(slot), &mut entry).unwrap();
        assert_eq!(entry[0], expected, "slot {slot}");
        assert!(entry[1..].iter().all(|&b| b == 0), "slot {slot} zeroed");
    }
}

#[test]
fn a_write_that_faults_posts_nothing_from_its_run() {
    let host = SimMemory::new(1 << 20);
    // No memory behind the ring: its first WQE's write faults.
    let sq = WorkRing::new(RingDesc { base: 0x40, entries: 4, stride: 16 }, 4, "full");
    let (posted, result) = sq.post_chain(&host, &[1u8, 2], |_, _| Ok(()));
    let fault = MemFault { addr: sq.desc.entry_addr(0), len: 32 };
    assert_eq!((posted, result), (0, Err((0, fault.into()))));
    assert_eq!(host.faults(), 1, "one write, nothing published");
}

#[test]
fn completions_across_the_ring_end_are_read_in_order() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
    publish(&host, cq.desc(), PRODUCER_OFFSET, 3).unwrap();
    cq.set_consumer(&mut cq.state(), 3);
    for n in 3..6u32 {
        let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Recv, Qpn::new(16));
        host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
    }
    publish(&host, cq.desc(), PRODUCER_OFFSET, 6).unwrap();
    let got = polled(&cq, &host, 8);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 6);
}

#[test]
fn completions_are_read_in_order_and_handed_back() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
    assert!(polled(&cq, &host, 4).is_empty());
    for n in 0..3u32 {
        let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Send, Qpn::new(16));
        host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
    }
    publish(&host, cq.desc(), PRODUCER_OFFSET, 3).unwrap();
    let got = polled(&cq, &host, 2);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 2);
    assert_eq!(polled(&cq, &host, 4)[0].wr_id, 2);
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 3);
}

#[test]
fn two_threads_polling_one_cq_take_each_completion_once() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 512, CQE_LEN as u32));
    for n in 0..500u32 {
        let cqe = Cqe::new(u64::from(n), WcStatus::Success, WcOpcode::Send, Qpn::new(16));
        host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
    }
    publish(&host, cq.desc(), PRODUCER_OFFSET, 500).unwrap();
    let take = || {
        let mut got = Vec::new();
        while let Some(cqe) = polled(&cq, &host, 1).pop() {
            got.push(cqe.wr_id);
        }
        got
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(take);
        let b = s.spawn(take);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(a.windows(2).all(|w| w[0] < w[1]) && b.windows(2).all(|w| w[0] < w[1]));
    let mut all: Vec<u64> = a.into_iter().chain(b).collect();
    all.sort_unstable();
    assert_eq!(all, (0..500).collect::<Vec<u64>>(), "each once");
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 500);
}

#[test]
fn a_qps_completions_are_discarded_and_the_others_kept_in_order() {
    let host = SimMemory::strict(1 << 20);
    let cq = CqRing::new(ring(&host, 4, CQE_LEN as u32));
    // Indices from 2, so that the six CQEs wrap the four slots.
    publish(&host, cq.desc(), PRODUCER_OFFSET, 2).unwrap();
    publish(&host, cq.desc(), CONSUMER_OFFSET, 2).unwrap();
    cq.set_consumer(&mut cq.state(), 2);
    let write = |n: u32, qpn: u32| {
        let cqe = Cqe::new(u64::from(n), WcStatus::WrFlushErr, WcOpcode::Recv, Qpn::new(qpn));
        host.write(cq.desc().entry_addr(n), &cqe.encode()).unwrap();
    };
    for (n, qpn) in [(2, 17), (3, 16), (4, 17), (5, 16)] {
        write(n, qpn);
    }
    publish(&host, cq.desc(), PRODUCER_OFFSET, 6).unwrap();
    assert_eq!(cq.discard(&host, Qpn::new(17)).unwrap(), 2);
    assert_eq!(index(&host, cq.desc(), CONSUMER_OFFSET), 4, "two slots handed back");
    assert_eq!(cq.discard(&host, Qpn::new(17)).unwrap(), 0);
    // The HCA goes on writing above its producer index.
    write(6, 16);
    publish(&host, cq.desc(), PRODUCER_OFFSET, 7).unwrap();
    let got = polled(&cq, &host, 8);
    assert_eq!(got.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 5, 6]);
}
