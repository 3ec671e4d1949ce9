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
