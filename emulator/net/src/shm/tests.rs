//! The shared memory's own tests: allocation, liveness, word access and
//! the bounds of a view.

use super::*;

#[test]
fn allocations_are_zeroed_pages_and_freed_pages_fault() {
    let shm = SharedMemory::create(64 * PAGE).unwrap();
    let a = shm.allocate(100, 4096).unwrap();
    let b = shm.allocate(3 * PAGE, 4096).unwrap();
    assert_eq!(a % PAGE, 0);
    assert_eq!(shm.allocated_bytes(), 4 * PAGE);
    shm.write(a, b"hello").unwrap();
    let mut back = [0; 5];
    shm.read(a, &mut back).unwrap();
    assert_eq!(&back, b"hello");
    // The rest of the page is the allocation's; the next page is b's.
    assert!(shm.read(a + PAGE - 1, &mut [0; 1]).is_ok());
    assert!(shm.free(a));
    assert!(!shm.free(a), "freed once");
    assert!(shm.read(a, &mut back).is_err(), "a freed page faults");
    let again = shm.allocate(PAGE, 4096).unwrap();
    assert_eq!(again, a, "first fit reuses the page");
    shm.read(again, &mut back).unwrap();
    assert_eq!(back, [0; 5], "punched out: zeros again");
    assert!(shm.read(b + 3 * PAGE, &mut [0; 1]).is_err(), "past b is unallocated");
    assert!(shm.read(b + 3 * PAGE - 4, &mut [0; 8]).is_err(), "straddling into it too");
    assert!(shm.faults() >= 3);
}

#[test]
fn words_are_atomic_and_aligned() {
    let shm = SharedMemory::create(PAGE).unwrap();
    let a = shm.allocate(64, 64).unwrap();
    shm.store_release_u32(a, 7).unwrap();
    assert_eq!(shm.load_acquire_u32(a).unwrap(), 7);
    assert_eq!(shm.fetch_add_u64(a + 8, 5).unwrap(), 0);
    assert_eq!(shm.compare_swap_u64(a + 8, 5, 9).unwrap(), 5);
    assert_eq!(shm.compare_swap_u64(a + 8, 5, 1).unwrap(), 9);
    assert!(shm.load_acquire_u32(a + 1).is_err(), "unaligned");
    assert!(shm.fetch_add_u64(a + 4, 1).is_err(), "unaligned");
}

#[test]
fn addresses_outside_the_data_fault_without_overflow() {
    let shm = SharedMemory::create(PAGE).unwrap();
    let a = shm.allocate(PAGE, PAGE).unwrap();
    for (addr, len) in [(0, 1), (a - 1, 1), (a + PAGE, 1), (u64::MAX, 2), (a, u64::MAX)] {
        assert!(shm.map.resolve(addr, len).is_err(), "{addr:x}+{len}");
    }
    assert!(shm.read(a + PAGE - 1, &mut [0; 2]).is_err(), "straddles the end");
    assert!(shm.allocate(2 * PAGE, PAGE).is_err(), "past the budget");
}

#[test]
fn words_outside_live_data_fault_and_a_view_with_an_odd_base_stays_inside() {
    let shm = SharedMemory::create(2 * PAGE).unwrap();
    let a = shm.allocate(PAGE, PAGE).unwrap();
    let end = shm.addr_base() + 2 * PAGE;
    assert!(shm.load_acquire_u32(a + PAGE - 4).is_ok(), "the last word of the page");
    assert!(shm.load_acquire_u32(a + PAGE).is_err(), "the next page is not live");
    for addr in [0, a - 4, end, end - 4, u64::MAX - 3] {
        assert!(shm.load_acquire_u32(addr).is_err(), "{addr:x}");
        assert!(shm.store_release_u32(addr, 1).is_err(), "{addr:x}");
    }
    shm.allocate(PAGE, PAGE).unwrap();
    assert!(shm.fetch_add_u64(end - 8, 1).is_ok(), "the data's last word");
    // A view whose base the driver gave 2 bytes off: a word aligned in
    // the device's space lies misaligned in the mapping, and the other
    // way round. Every word access is refused (an atomic on a
    // misaligned pointer would be undefined behaviour); bytes still go.
    let fd = shm.fd().try_clone_to_owned().unwrap();
    let view = SharedView::map(fd, shm.addr_base() + 2).unwrap();
    for addr in [a, a + 2, a + 4, a + 8, a + 10, end - 8, end - 6] {
        assert!(view.load_acquire_u32(addr).is_err(), "{addr:x}");
        assert!(view.fetch_add_u64(addr, 0).is_err(), "{addr:x}");
    }
    assert!(view.read(a + 2, &mut [0; 3]).is_ok());
}

#[test]
fn a_view_of_the_memfd_sees_the_same_bytes_at_the_same_addresses() {
    let shm = SharedMemory::create(16 * PAGE).unwrap();
    let a = shm.allocate(2 * PAGE, PAGE).unwrap();
    let fd = shm.fd().try_clone_to_owned().unwrap();
    let view = SharedView::map(fd, shm.addr_base()).unwrap();
    shm.write(a + PAGE - 2, b"abcd").unwrap();
    let mut got = [0; 4];
    view.read(a + PAGE - 2, &mut got).unwrap();
    assert_eq!(&got, b"abcd");
    view.store_release_u32(a + 64, 42).unwrap();
    assert_eq!(shm.load_acquire_u32(a + 64).unwrap(), 42);
    shm.free(a);
    assert!(view.read(a, &mut got).is_err(), "the view sees the page die");
    let other = SharedMemory::create(PAGE).unwrap();
    let bad = SharedView::map(other.fd().try_clone_to_owned().unwrap(), u64::MAX - 10);
    assert!(bad.is_err(), "addresses that would overflow are refused");
}

#[test]
fn a_memfd_that_is_not_uroce_shared_memory_is_refused() {
    let fd = rustix::fs::memfd_create("other", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4 * PAGE).unwrap();
    assert!(matches!(SharedView::map(fd, 1 << 40), Err(ShmError::BadHeader)));
}

#[test]
fn first_fit_merges_freed_runs() {
    let shm = SharedMemory::create(8 * PAGE).unwrap();
    let blocks: Vec<u64> = (0..8).map(|_| shm.allocate(PAGE, PAGE).unwrap()).collect();
    assert!(shm.allocate(PAGE, PAGE).is_err(), "full");
    for &b in &blocks[2..6] {
        assert!(shm.free(b));
    }
    let big = shm.allocate(4 * PAGE, PAGE).unwrap();
    assert_eq!(big, blocks[2], "the four freed pages merged into one run");
}
