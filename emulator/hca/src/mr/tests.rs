//! Tests of the memory tables.

use super::*;
use crate::handles::PdIndex;
use uroce_device::mem::{DriverMemory, SimMemory};

fn setup() -> (MemoryTables, Arc<SimMemory>, u64) {
    let host = Arc::new(SimMemory::strict(1 << 24));
    let buf = host.allocate(3 * 4096, 4096).unwrap();
    let tables = MemoryTables::new(host.clone(), 16, 12, u64::MAX);
    (tables, host, buf)
}

const RW: Access = Access(1 | 2 | 4);

#[test]
fn translation_spans_pages() {
    let (mut t, host, buf) = setup();
    // Register from the middle of the first page, seen at iova 0x7000_0100.
    let key = t.register(PdIndex(1), buf + 100, 8000, 0x7000_0100, RW).unwrap();
    let mtt = t.mtt_of(key >> 8).unwrap();
    assert_eq!(mtt.pages.len(), 2);
    assert_eq!(mtt.first_page_offset, 100);
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let range = t
        .check(key, PdIndex(1), 0x7000_0100 + 3000, 5000, Access::LOCAL_WRITE, Origin::Local)
        .unwrap();
    t.write(&range, &data).unwrap();
    let mut direct = vec![0u8; 5000];
    host.read(buf + 100 + 3000, &mut direct).unwrap();
    assert_eq!(direct, data, "bytes land where the MTT says");
    let mut back = vec![0u8; 5000];
    t.read(&range, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn every_check_refuses_what_it_should() {
    let (mut t, _, buf) = setup();
    let key =
        t.register(PdIndex(1), buf, 4096, buf, Access::LOCAL_WRITE | Access::REMOTE_READ).unwrap();
    let remote = Origin::Remote { qpn: Qpn::new(20) };
    let ok = t.check(key, PdIndex(1), buf, 4096, Access::REMOTE_READ, remote);
    assert!(ok.is_ok());
    assert_eq!(
        t.check(key, PdIndex(2), buf, 8, Access::REMOTE_READ, remote),
        Err(AccessError::WrongPd)
    );
    assert_eq!(
        t.check(key, PdIndex(1), buf, 8, Access::REMOTE_WRITE, remote),
        Err(AccessError::NotPermitted)
    );
    assert_eq!(
        t.check(key, PdIndex(1), buf + 4090, 8, Access::REMOTE_READ, remote),
        Err(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check(key, PdIndex(1), buf - 1, 2, Access::REMOTE_READ, remote),
        Err(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check(key, PdIndex(1), u64::MAX, 2, Access::REMOTE_READ, remote),
        Err(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check(key ^ 1, PdIndex(1), buf, 8, Access::REMOTE_READ, remote),
        Err(AccessError::BadKey),
        "stale 8-bit key"
    );
    assert_eq!(
        t.check(key + 0x100, PdIndex(1), buf, 8, Access::REMOTE_READ, remote),
        Err(AccessError::BadKey),
        "no entry"
    );
    // Zero-length accesses need no valid key.
    assert!(t.check(0xdead_beef, PdIndex(9), 0, 0, Access::REMOTE_WRITE, remote).is_ok());
}

#[test]
fn invalidation_and_a_new_key() {
    let (mut t, _, buf) = setup();
    let key = t.register(PdIndex(1), buf, 4096, buf, RW).unwrap();
    assert!(t.invalidate(key));
    assert!(!t.invalidate(key), "already invalid");
    assert_eq!(
        t.check(key, PdIndex(1), buf, 8, Access::EMPTY, Origin::Local),
        Err(AccessError::BadKey)
    );
    let fresh = t.revalidate(key).unwrap();
    assert_ne!(fresh, key);
    assert_eq!(fresh >> 8, key >> 8, "same MPT index");
    assert!(t.check(fresh, PdIndex(1), buf, 8, Access::EMPTY, Origin::Local).is_ok());
    assert_eq!(
        t.check(key, PdIndex(1), buf, 8, Access::EMPTY, Origin::Local),
        Err(AccessError::BadKey)
    );
}

#[test]
fn registration_rules() {
    let (mut t, _, buf) = setup();
    assert_eq!(
        t.register(PdIndex(1), buf, 64, buf, Access::REMOTE_WRITE),
        Err(RegisterError::AccessNeedsLocalWrite)
    );
    assert_eq!(t.register(PdIndex(1), buf, 0, buf, RW), Err(RegisterError::BadArgument));
    assert_eq!(t.register(PdIndex(1), buf, 64, u64::MAX - 10, RW), Err(RegisterError::BadArgument));
    assert_eq!(
        t.register(PdIndex(1), buf, 64, buf, Access(1 << 29)),
        Err(RegisterError::BadArgument)
    );
    for _ in 0..16 {
        t.register(PdIndex(1), buf, 64, buf, RW).unwrap();
    }
    assert_eq!(t.register(PdIndex(1), buf, 64, buf, RW), Err(RegisterError::TableFull));
}

#[test]
fn freed_host_memory_is_a_fault_not_ub() {
    let host = Arc::new(SimMemory::new(1 << 20));
    let buf = host.allocate(4096, 4096).unwrap();
    let mut t = MemoryTables::new(host.clone(), 4, 12, u64::MAX);
    let key = t.register(PdIndex(1), buf, 4096, buf, RW).unwrap();
    host.free(buf);
    let range = t.check(key, PdIndex(1), buf, 16, Access::LOCAL_WRITE, Origin::Local).unwrap();
    assert!(matches!(t.write(&range, &[0; 16]), Err(AccessError::Fault(_))));
    assert_eq!(t.dma_faults(), 1, "one access, one fault counted");
    assert!(matches!(t.read(&range, &mut [0; 16]), Err(AccessError::Fault(_))));
    let word = t.check(key, PdIndex(1), buf + 8, 8, Access::LOCAL_WRITE, Origin::Local).unwrap();
    assert!(matches!(t.atomic(&word, WordOp::FetchAdd(1)), Err(AccessError::Fault(_))));
    assert_eq!(t.dma_faults(), 3);
}

#[test]
fn a_multi_page_access_that_faults_counts_once() {
    let host = Arc::new(SimMemory::new(1 << 20));
    let buf = host.allocate(3 * 4096, 4096).unwrap();
    let mut t = MemoryTables::new(host.clone(), 4, 12, u64::MAX);
    let key = t.register(PdIndex(1), buf, 3 * 4096, buf, RW).unwrap();
    let word = t.check(key, PdIndex(1), buf + 16, 8, Access::LOCAL_WRITE, Origin::Local).unwrap();
    assert_eq!(t.atomic(&word, WordOp::FetchAdd(5)), Ok(0));
    assert_eq!(t.atomic(&word, WordOp::CompareSwap { compare: 5, swap: 9 }), Ok(5));
    assert_eq!(t.atomic(&word, WordOp::Store(3)), Ok(3));
    assert_eq!(t.atomic(&word, WordOp::FetchAdd(0)), Ok(3));
    host.free(buf);
    let range =
        t.check(key, PdIndex(1), buf, 3 * 4096, Access::LOCAL_WRITE, Origin::Local).unwrap();
    assert!(t.read(&range, &mut vec![0; 3 * 4096]).is_err());
    assert_eq!(t.dma_faults(), 1);
}

#[test]
fn reregistration_keeps_the_key_and_changes_what_it_allows() {
    let (mut t, host, buf) = setup();
    let remote = Origin::Remote { qpn: Qpn::new(20) };
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let key = t.register(PdIndex(1), buf, 4096, buf, rw).unwrap();
    // A new translation: the old range is out of bounds, the new one is
    // written where its MTT says.
    let moved = buf + 2 * 4096 + 100;
    let change = Reregistration { translation: Some((moved, 64, 0x9000)), ..Default::default() };
    assert_eq!(t.reregister(key, change), Ok(PdIndex(1)));
    assert_eq!(
        t.check(key, PdIndex(1), buf, 8, Access::REMOTE_WRITE, remote),
        Err(AccessError::OutOfBounds)
    );
    let range = t.check(key, PdIndex(1), 0x9000 + 8, 4, Access::REMOTE_WRITE, remote).unwrap();
    t.write(&range, &[1, 2, 3, 4]).unwrap();
    let mut landed = [0u8; 4];
    host.read(moved + 8, &mut landed).unwrap();
    assert_eq!(landed, [1, 2, 3, 4]);
    // Another PD: the old one's QPs are refused.
    let change = Reregistration { pd: Some(PdIndex(2)), ..Default::default() };
    assert_eq!(t.reregister(key, change), Ok(PdIndex(1)));
    assert_eq!(
        t.check(key, PdIndex(1), 0x9000, 8, Access::EMPTY, Origin::Local),
        Err(AccessError::WrongPd)
    );
    // Rights taken away, and rights the rules refuse (nothing changes).
    let change = Reregistration { access: Some(Access::LOCAL_WRITE), ..Default::default() };
    assert_eq!(t.reregister(key, change), Ok(PdIndex(2)));
    assert_eq!(
        t.check(key, PdIndex(2), 0x9000, 8, Access::REMOTE_WRITE, remote),
        Err(AccessError::NotPermitted)
    );
    let change = Reregistration { access: Some(Access::REMOTE_WRITE), ..Default::default() };
    assert_eq!(t.reregister(key, change), Err(RegisterError::AccessNeedsLocalWrite));
    let zero_based = Access::LOCAL_WRITE | Access::ZERO_BASED;
    let change = Reregistration { access: Some(zero_based), ..Default::default() };
    assert_eq!(t.reregister(key, change), Err(RegisterError::BadArgument));
    let change = Reregistration { translation: Some((buf, 0, buf)), ..Default::default() };
    assert_eq!(t.reregister(key, change), Err(RegisterError::BadArgument));
    assert!(t.check(key, PdIndex(2), 0x9000, 64, Access::LOCAL_WRITE, Origin::Local).is_ok());
    // A stale key, and a window's key, are no region.
    let change = Reregistration { access: Some(RW), ..Default::default() };
    assert_eq!(t.reregister(key ^ 1, change), Err(RegisterError::NotFound));
    let mw = t.alloc_window(PdIndex(2), 1).unwrap();
    assert_eq!(t.reregister(mw, change), Err(RegisterError::NotFound));
    // An invalidated region is valid again under the same key.
    assert!(t.invalidate(key));
    assert_eq!(t.reregister(key, change), Ok(PdIndex(2)));
    assert!(t.check(key, PdIndex(2), 0x9000, 8, Access::REMOTE_READ, remote).is_ok());
}

#[test]
fn reregistration_is_refused_while_windows_are_bound() {
    let (mut t, _, buf) = setup();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
    let key = t.register(PdIndex(1), buf, 4096, buf, access).unwrap();
    let mw = t.alloc_window(PdIndex(1), 1).unwrap();
    let qpn = Qpn::new(20);
    let rkey =
        t.bind_window(mw, None, key, buf, 64, Access::REMOTE_WRITE, PdIndex(1), qpn).unwrap();
    let change = Reregistration { access: Some(Access::LOCAL_WRITE), ..Default::default() };
    assert_eq!(t.reregister(key, change), Err(RegisterError::Busy));
    let remote = Origin::Remote { qpn };
    assert!(t.check(rkey, PdIndex(1), buf, 64, Access::REMOTE_WRITE, remote).is_ok());
    t.dealloc_window(rkey).unwrap();
    assert_eq!(t.reregister(key, change), Ok(PdIndex(1)));
}
