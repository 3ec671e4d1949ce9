//! `ProcessMemory`: host memory over real process memory, every access
//! checked against the ranges it knows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use uroce_device::mem::{AllocError, DriverMemory, HostMemory, MemFault};
use uroce_net::process_mem::ProcessMemory;

#[test]
fn is_send_and_sync_and_a_host_memory() {
    fn host<T: HostMemory + Send + Sync + 'static>() {}
    host::<ProcessMemory>();
    let _shared: Arc<dyn HostMemory> = Arc::new(ProcessMemory::new(1 << 20).unwrap());
}

#[test]
fn allocations_are_zeroed_aligned_and_read_back() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let a = mem.allocate(100, 64).unwrap();
    assert_eq!(a % 64, 0);
    assert_ne!(a, 0);
    assert_eq!(mem.allocated_bytes(), 4096, "whole pages");
    let mut all = [0xffu8; 100];
    mem.read(a, &mut all).unwrap();
    assert_eq!(all, [0u8; 100], "allocations are zeroed");
    mem.write(a + 10, b"hello").unwrap();
    let mut buf = [0u8; 5];
    mem.read(a + 10, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    // The whole allocation, up to its last byte.
    let pattern: Vec<u8> = (0..100).collect();
    mem.write(a, &pattern).unwrap();
    mem.read(a, &mut all).unwrap();
    assert_eq!(&all[..], &pattern[..]);
    // Zero-length accesses inside (or at the end of) a range succeed.
    mem.read(a + 100, &mut []).unwrap();
    mem.write(a, &[]).unwrap();
    assert_eq!(mem.faults(), 0);

    let big = mem.allocate(4096, 4096).unwrap();
    assert_eq!(big % 4096, 0);
    mem.write(big + 4088, &[7; 8]).unwrap();
    let mut tail = [0u8; 8];
    mem.read(big + 4088, &mut tail).unwrap();
    assert_eq!(tail, [7; 8]);
}

#[test]
fn accesses_outside_allocated_pages_fault() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let a = mem.allocate(100, 8).unwrap();
    assert_eq!(a % 4096, 0, "allocations are whole pages");
    let end = a + 4096;
    let mut buf = [0u8; 8];
    // Before, straddling the start, straddling the end, just after.
    assert_eq!(mem.read(a - 1, &mut buf[..1]), Err(MemFault { addr: a - 1, len: 1 }));
    assert!(mem.read(a - 4, &mut buf).is_err());
    assert_eq!(mem.read(end - 4, &mut buf), Err(MemFault { addr: end - 4, len: 8 }));
    assert!(mem.write(end, &buf[..1]).is_err());
    assert!(mem.write(a + 50, &[0u8; 4096]).is_err());
    // Address 0, the top of the address space, and wrapping.
    assert!(mem.read(0, &mut buf).is_err());
    assert!(mem.read(0, &mut []).is_err());
    assert!(mem.write(u64::MAX, &buf[..1]).is_err());
    assert!(mem.write(u64::MAX - 2, &buf).is_err());
    assert!(mem.read(a, &mut vec![0u8; 1 << 20]).is_err());
    assert!(mem.load_acquire_u32(0).is_err());
    assert!(mem.fetch_add_u64(u64::MAX - 7, 1).is_err());
    assert!(mem.compare_swap_u64(0, 0, 1).is_err());
    assert!(mem.store_u64(end - 4, 1).is_err(), "word straddles the end (and is unaligned)");
    assert!(mem.store_release_u32(end, 1).is_err());
    assert_eq!(mem.faults(), 15);
    // Inside the page is fine, past the 100 bytes asked for too.
    assert!(mem.read(a + 92, &mut buf).is_ok());
    assert!(mem.read(end - 8, &mut buf).is_ok());
    assert_eq!(mem.faults(), 15);

    // After free.
    assert!(mem.free(a));
    assert_eq!(mem.allocated_bytes(), 0);
    assert!(mem.read(a, &mut buf).is_err(), "freed memory faults");
    assert!(mem.fetch_add_u64(a, 1).is_err());
    assert!(!mem.free(a), "double free is refused");
    assert!(!mem.free(0));
    assert!(!mem.free(a + 8), "free needs the start address");
    assert_eq!(mem.faults(), 17);
}

#[test]
fn budget_and_bad_requests() {
    let mem = ProcessMemory::new(2 * 4096).unwrap();
    let a = mem.allocate(600, 8).unwrap();
    let b = mem.allocate(4000, 8).unwrap();
    assert_eq!(mem.allocate(1, 8), Err(AllocError::OutOfMemory), "two pages, both taken");
    assert_eq!(mem.allocate(2 * 4096 + 1, 8), Err(AllocError::BadRequest));
    assert_eq!(mem.allocate(0, 8), Err(AllocError::BadRequest));
    assert_eq!(mem.allocate(8, 3), Err(AllocError::BadRequest));
    assert_eq!(mem.allocate(8, 0), Err(AllocError::BadRequest));
    assert_eq!(mem.allocate(u64::MAX, 8), Err(AllocError::BadRequest));
    assert_eq!(mem.allocate(8, 1 << 63), Err(AllocError::BadRequest));
    assert!(mem.free(a) && mem.free(b));
    assert!(mem.allocate(2 * 4096, 8).is_ok(), "freed pages return to the budget");
}

#[test]
fn external_ranges_are_the_applications_memory() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let mut app: Vec<u8> = (0..64).collect();
    let ptr = app.as_mut_ptr();
    // SAFETY: `app` is neither touched, grown nor dropped until the range
    // is unregistered below; meanwhile only `mem` accesses it.
    let addr = unsafe { mem.register_external(ptr, app.len()) }.unwrap();
    assert_eq!(addr, ptr as u64, "the address is the real pointer");
    assert_eq!(mem.external_bytes(), 64);
    assert_eq!(mem.allocated_bytes(), 0, "external ranges are not budgeted");

    // Reads see the Vec's bytes.
    let mut buf = [0u8; 8];
    mem.read(addr + 8, &mut buf).unwrap();
    assert_eq!(buf, [8, 9, 10, 11, 12, 13, 14, 15]);
    // Writes and atomics land in it.
    mem.write(addr, b"DMA!").unwrap();
    if addr % 8 == 0 {
        mem.store_u64(addr + 56, 0x0102_0304_0506_0708).unwrap();
    }
    // Outside it faults.
    assert!(mem.read(addr + 60, &mut buf).is_err());
    assert!(mem.read(addr - 1, &mut buf[..1]).is_err());
    // It is not an allocation: `free` leaves it alone.
    assert!(!mem.free(addr));
    mem.read(addr, &mut buf[..4]).unwrap();

    assert!(!mem.unregister_external(addr, 63), "not a registration: the length differs");
    assert!(mem.unregister_external(addr, 64));
    assert!(!mem.unregister_external(addr, 64));
    assert_eq!(mem.external_bytes(), 0);
    assert!(mem.read(addr, &mut buf).is_err(), "unregistered memory faults");
    drop(mem);

    assert_eq!(&app[..4], b"DMA!");
    assert_eq!(&app[4..56], &(4..56).collect::<Vec<u8>>()[..]);
    if ptr as u64 % 8 == 0 {
        assert_eq!(&app[56..], &0x0102_0304_0506_0708u64.to_ne_bytes());
    }
}

#[test]
fn atomics_on_external_words() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    // A `Vec<u64>`'s buffer is 8-byte aligned.
    let mut words: Vec<u64> = vec![10, 20, 30, 40];
    let len = words.len() * 8;
    // SAFETY: `words` is not touched, grown or dropped until the range is
    // unregistered; meanwhile only `mem` accesses it.
    let addr = unsafe { mem.register_external(words.as_mut_ptr().cast(), len) }.unwrap();
    assert_eq!(mem.fetch_add_u64(addr, 5).unwrap(), 10);
    assert_eq!(mem.compare_swap_u64(addr + 8, 20, 21).unwrap(), 20);
    assert_eq!(mem.compare_swap_u64(addr + 16, 0, 1).unwrap(), 30);
    mem.store_u64(addr + 24, u64::MAX).unwrap();
    assert_eq!(mem.fetch_add_u64(addr + 24, 1).unwrap(), u64::MAX);
    assert!(mem.fetch_add_u64(addr + 4, 1).is_err());
    assert_eq!(mem.load_acquire_u32(addr + 32).map_err(|f| f.len), Err(4));
    assert!(mem.unregister_external(addr, len));
    assert_eq!(words, [15, 21, 30, 0]);
}

#[test]
fn external_registration_is_checked() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let own = mem.allocate(64, 8).unwrap();
    let mut app = vec![0u8; 64];
    let ptr = app.as_mut_ptr();
    // SAFETY: each call either fails or is undone before `app` is used or
    // dropped; `app` is only accessed through `mem` meanwhile.
    unsafe {
        assert_eq!(mem.register_external(std::ptr::null_mut(), 8), Err(AllocError::BadRequest));
        assert_eq!(mem.register_external(ptr, 0), Err(AllocError::BadRequest));
        assert_eq!(mem.register_external(ptr, usize::MAX), Err(AllocError::BadRequest));
        let addr = mem.register_external(ptr, 32).unwrap();
        let second = mem.register_external(ptr.add(32), 32).unwrap();
        // An own allocation cannot be registered again as external memory,
        // nor a range reaching into it, nor one around it.
        let own_ptr = own as usize as *mut u8;
        assert_eq!(mem.register_external(own_ptr, 8), Err(AllocError::BadRequest));
        let inside = (own + 8) as usize as *mut u8;
        assert_eq!(mem.register_external(inside, 8), Err(AllocError::BadRequest));
        let base = mem.arena().addr_base();
        let before = (base - 16) as usize as *mut u8;
        assert_eq!(mem.register_external(before, 32), Err(AllocError::BadRequest));
        assert_eq!(mem.register_external(before, 1 << 40), Err(AllocError::BadRequest));
        // An access may not span two registrations, even adjacent ones.
        assert!(mem.read(addr + 28, &mut [0u8; 8]).is_err());
        // `unregister_external` does not remove own allocations.
        assert!(!mem.unregister_external(own, 64));
        assert!(mem.unregister_external(addr, 32));
        assert!(mem.unregister_external(second, 32));
    }
    assert_eq!(mem.external_bytes(), 0);
    assert!(mem.free(own));
    app[0] = 1;
}

#[test]
fn overlapping_and_repeated_registrations_are_each_their_own() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    // 256 bytes, 8-byte aligned (a `Vec<u64>`'s buffer).
    let mut app: Vec<u64> = vec![0; 32];
    let ptr: *mut u8 = app.as_mut_ptr().cast();
    let at = |offset: u64| ptr as u64 + offset;
    let mut buf = [0u8; 8];
    // SAFETY: `app` is neither touched, grown nor dropped until every range
    // is unregistered below; meanwhile only `mem` accesses it.
    let (whole, again, sub, straddle, head) = unsafe {
        (
            mem.register_external(ptr, 256).unwrap(),
            mem.register_external(ptr, 256).unwrap(),
            mem.register_external(ptr.add(64), 64).unwrap(),
            mem.register_external(ptr.add(96), 128).unwrap(),
            mem.register_external(ptr, 32).unwrap(),
        )
    };
    assert_eq!((whole, again, sub, straddle, head), (at(0), at(0), at(64), at(96), at(0)));
    assert_eq!(mem.external_bytes(), 256 + 256 + 64 + 128 + 32, "every registration counts");
    assert_eq!(mem.external_registrations(), 5);

    // Everything inside the whole buffer is reachable, across the
    // sub-ranges' bounds too.
    mem.write(at(0), &[1; 256]).unwrap();
    mem.write(at(60), b"spanning").unwrap();
    assert_eq!(mem.fetch_add_u64(at(96), 5).unwrap(), 0x0101_0101_0101_0101);
    mem.read(at(248), &mut buf).unwrap();
    assert!(mem.read(at(252), &mut buf).is_err(), "past the end of the buffer");

    // Wrong lengths or addresses name no registration.
    assert!(!mem.unregister_external(at(64), 63));
    assert!(!mem.unregister_external(at(64), 128));
    assert!(!mem.unregister_external(at(8), 256));
    assert_eq!(mem.external_registrations(), 5);

    // One of the two registrations of the whole buffer goes: the other
    // still covers it.
    assert!(mem.unregister_external(at(0), 256));
    assert_eq!(mem.external_bytes(), 256 + 64 + 128 + 32);
    mem.write(at(200), b"still ok").unwrap();
    mem.read(at(0), &mut buf).unwrap();
    // The second goes: what the others cover stays reachable, each access
    // inside one of them.
    assert!(mem.unregister_external(at(0), 256));
    assert_eq!(mem.external_bytes(), 64 + 128 + 32);
    mem.read(at(24), &mut buf).unwrap(); // head
    mem.read(at(64), &mut buf).unwrap(); // sub
    mem.read(at(100), &mut buf).unwrap(); // sub and straddle
    mem.read(at(216), &mut buf).unwrap(); // straddle, up to its last byte
    let mut long = [0u8; 128];
    mem.read(at(96), &mut long).unwrap(); // the longest left, whole
                                          // Accesses that no single registration contains fault: over the gap
                                          // between head and sub, across two overlapping ones, across two
                                          // adjacent ones, past straddle's end.
    assert!(mem.read(at(28), &mut buf).is_err());
    assert!(mem.read(at(40), &mut buf).is_err());
    assert!(mem.read(at(64), &mut long[..96]).is_err(), "sub + straddle: no one contains it");
    assert!(mem.read(at(220), &mut buf).is_err());
    // SAFETY: as above.
    let tail = unsafe { mem.register_external(ptr.add(32), 32) }.unwrap();
    assert!(mem.read(at(28), &mut buf).is_err(), "head and tail are adjacent, not merged");
    mem.read(at(32), &mut buf).unwrap();

    assert!(mem.unregister_external(straddle, 128));
    assert!(mem.read(at(100), &mut buf).is_ok(), "sub still covers it");
    assert!(mem.read(at(120), &mut buf).is_ok());
    assert!(mem.read(at(124), &mut buf).is_err(), "straddle is gone");
    assert!(mem.unregister_external(sub, 64));
    assert!(mem.unregister_external(head, 32));
    assert!(mem.unregister_external(tail, 32));
    assert!(!mem.unregister_external(tail, 32));
    assert_eq!((mem.external_bytes(), mem.external_registrations()), (0, 0));
    assert!(mem.read(at(64), &mut buf).is_err());
    drop(mem);

    let bytes: Vec<u8> = app.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(&bytes[60..68], b"spanning");
    assert_eq!(&bytes[200..208], b"still ok");
    assert_eq!(app[12], 0x0101_0101_0101_0106, "the FETCH_ADD landed");
}

#[test]
fn accesses_through_one_registration_while_another_over_it_comes_and_goes() {
    let mem = Arc::new(ProcessMemory::new(1 << 20).unwrap());
    let mut app: Vec<u64> = vec![0; 64];
    let ptr: *mut u8 = app.as_mut_ptr().cast();
    // SAFETY: `app` is not touched, grown or dropped until the threads are
    // joined and every range unregistered; meanwhile only `mem` accesses
    // it.
    let addr = unsafe { mem.register_external(ptr, 512) }.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (mem, stop) = (mem.clone(), stop.clone());
        // The pointer's address: the thread registers sub-ranges of the
        // same buffer (a raw pointer is not `Send`).
        let base = ptr.expose_provenance();
        thread::spawn(move || {
            let ptr = std::ptr::with_exposed_provenance_mut::<u8>(base);
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 100 {
                let offset = (rounds % 8) * 64;
                // SAFETY: inside the buffer registered above, which stays
                // valid until the threads are joined.
                let sub = unsafe { mem.register_external(ptr.add(offset as usize), 64) }.unwrap();
                // SAFETY: the buffer registered above, again.
                let again = unsafe { mem.register_external(ptr, 512) }.unwrap();
                assert!(mem.unregister_external(again, 512));
                assert!(mem.unregister_external(sub, 64));
                rounds += 1;
            }
        })
    };
    for i in 0..20_000u64 {
        assert_eq!(mem.fetch_add_u64(addr + (i % 64) * 8, 1), Ok(i / 64));
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    assert_eq!(mem.external_registrations(), 1);
    assert!(mem.unregister_external(addr, 512));
    drop(mem);
    assert_eq!(app.iter().sum::<u64>(), 20_000);
}

#[test]
fn dropping_keeps_external_memory() {
    let mut app = vec![5u8; 16];
    let mem = ProcessMemory::new(1 << 20).unwrap();
    for _ in 0..8 {
        mem.allocate(256, 16).unwrap();
    }
    // SAFETY: `app` outlives `mem` and is not touched until `mem` is
    // dropped.
    let addr = unsafe { mem.register_external(app.as_mut_ptr(), app.len()) }.unwrap();
    mem.write(addr, &[9; 4]).unwrap();
    drop(mem); // frees the 8 allocations, not `app`
    assert_eq!(app, [9, 9, 9, 9, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5]);
    app.push(1);
}

#[test]
fn rdma_atomics_on_aligned_words() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let a = mem.allocate(16, 8).unwrap();
    assert_eq!(mem.fetch_add_u64(a, 5).unwrap(), 0);
    assert_eq!(mem.fetch_add_u64(a, u64::MAX).unwrap(), 5, "wraps");
    assert_eq!(mem.fetch_add_u64(a, 0).unwrap(), 4);
    assert_eq!(mem.compare_swap_u64(a, 4, 99).unwrap(), 4, "swap when equal");
    assert_eq!(mem.compare_swap_u64(a, 4, 7).unwrap(), 99, "no swap when different");
    assert_eq!(mem.fetch_add_u64(a, 0).unwrap(), 99);
    mem.store_u64(a, u64::MAX).unwrap();
    assert_eq!(mem.fetch_add_u64(a, 2).unwrap(), u64::MAX);
    assert_eq!(mem.fetch_add_u64(a, 0).unwrap(), 1, "u64::MAX + 2 wraps to 1");

    mem.store_u64(a + 8, 0x0102_0304_0506_0708).unwrap();
    let mut raw = [0u8; 8];
    mem.read(a + 8, &mut raw).unwrap();
    assert_eq!(raw, 0x0102_0304_0506_0708u64.to_ne_bytes(), "native byte order");
    #[cfg(target_endian = "little")]
    assert_eq!(raw, [8, 7, 6, 5, 4, 3, 2, 1], "little-endian, like SimMemory");

    let faults = mem.faults();
    for offset in 1..8 {
        assert_eq!(mem.fetch_add_u64(a + offset, 1), Err(MemFault { addr: a + offset, len: 8 }));
        assert!(mem.compare_swap_u64(a + offset, 0, 1).is_err());
        assert!(mem.store_u64(a + offset, 1).is_err());
    }
    assert_eq!(mem.faults(), faults + 21);
    assert_eq!(mem.fetch_add_u64(a, 0).unwrap(), 1, "unaligned atomics changed nothing");
}

#[test]
fn ring_indices_acquire_release() {
    let mem = ProcessMemory::new(1 << 20).unwrap();
    let a = mem.allocate(8, 8).unwrap();
    mem.store_release_u32(a, 0xdead_beef).unwrap();
    mem.store_release_u32(a + 4, 7).unwrap();
    assert_eq!(mem.load_acquire_u32(a).unwrap(), 0xdead_beef);
    assert_eq!(mem.load_acquire_u32(a + 4).unwrap(), 7);
    let mut raw = [0u8; 4];
    mem.read(a, &mut raw).unwrap();
    assert_eq!(raw, 0xdead_beefu32.to_ne_bytes());
    for offset in [1, 2, 3, 5] {
        assert_eq!(mem.load_acquire_u32(a + offset), Err(MemFault { addr: a + offset, len: 4 }));
        assert!(mem.store_release_u32(a + offset, 1).is_err());
    }
    assert_eq!(mem.faults(), 8);
    assert_eq!(mem.load_acquire_u32(a).unwrap(), 0xdead_beef);
}

#[test]
fn a_ring_index_publishes_data_across_threads() {
    let mem = Arc::new(ProcessMemory::new(1 << 20).unwrap());
    let ring = mem.allocate(64, 8).unwrap();
    let index = mem.allocate(4, 4).unwrap();
    let producer = {
        let mem = Arc::clone(&mem);
        thread::spawn(move || {
            for i in 1..=200u32 {
                mem.write(ring + u64::from(i % 16) * 4, &i.to_le_bytes()).unwrap();
                mem.store_release_u32(index, i).unwrap();
            }
        })
    };
    let mut seen = 0;
    while seen < 200 {
        let i = mem.load_acquire_u32(index).unwrap();
        if i > seen {
            let mut slot = [0u8; 4];
            mem.read(ring + u64::from(i % 16) * 4, &mut slot).unwrap();
            // The slot was written before index `i` was published; it may
            // already hold a later value (16 slots back), never an earlier.
            assert!(u32::from_le_bytes(slot) >= i);
            seen = i;
        }
    }
    producer.join().unwrap();
}

#[test]
fn fetch_add_from_many_threads_while_others_allocate_and_free() {
    const THREADS: u64 = 8;
    const ADDS: u64 = 20_000;
    let mem = Arc::new(ProcessMemory::new(64 << 20).unwrap());
    let word = mem.allocate(8, 8).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(THREADS as usize + 2));

    let churn = {
        let (mem, done, start) = (Arc::clone(&mem), Arc::clone(&done), Arc::clone(&start));
        thread::spawn(move || {
            start.wait();
            let mut live = Vec::new();
            let mut rounds = 0u64;
            while !done.load(Ordering::Relaxed) || rounds < 100 {
                let len = 64 + (rounds % 7) * 512;
                let a = mem.allocate(len, 1 << (rounds % 8)).unwrap();
                mem.write(a, &vec![rounds as u8; len as usize]).unwrap();
                live.push((a, len, rounds as u8));
                if live.len() > 16 {
                    let (old, old_len, fill) = live.remove(0);
                    let mut back = vec![0u8; old_len as usize];
                    mem.read(old, &mut back).unwrap();
                    assert!(back.iter().all(|&b| b == fill), "allocation kept its bytes");
                    assert!(mem.free(old));
                    assert!(mem.read(old, &mut [0u8; 1]).is_err(), "freed range faults");
                }
                rounds += 1;
            }
            for (a, _, _) in live {
                assert!(mem.free(a));
            }
            rounds
        })
    };

    // A thread that probes just-freed and never-known addresses meanwhile.
    let prober = {
        let (mem, done, start) = (Arc::clone(&mem), Arc::clone(&done), Arc::clone(&start));
        thread::spawn(move || {
            start.wait();
            let mut probes = 0u64;
            // At least 100 probes, however late this thread is scheduled
            // (on a loaded machine the adders may all finish first).
            while !done.load(Ordering::Relaxed) || probes < 100 {
                // Reads only (a neighbour may be a live churn allocation);
                // the unaligned atomic always faults.
                let _ = mem.read(word + 8, &mut [0u8; 8]);
                let _ = mem.read(word.wrapping_sub(8), &mut [0u8; 8]);
                assert!(mem.fetch_add_u64(word + 4, 1).is_err());
                assert!(mem.read(0, &mut [0u8; 1]).is_err());
                probes += 1;
            }
            probes
        })
    };

    let adders: Vec<_> = (0..THREADS)
        .map(|t| {
            let (mem, start) = (Arc::clone(&mem), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for _ in 0..ADDS {
                    mem.fetch_add_u64(word, t + 1).unwrap();
                }
            })
        })
        .collect();
    for adder in adders {
        adder.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() >= 100);
    assert!(prober.join().unwrap() >= 100);

    let expected = ADDS * (1..=THREADS).sum::<u64>();
    assert_eq!(mem.fetch_add_u64(word, 0).unwrap(), expected);
    assert_eq!(mem.allocated_bytes(), 4096, "only the counter word's page is left");
    assert!(mem.free(word));
}
