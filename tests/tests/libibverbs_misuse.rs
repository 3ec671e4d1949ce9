//! Misuse of the verbs from C (`tests/c/verbs_misuse.c`, compiled against
//! Debian's `libibverbs-dev`, run on uroce's `libibverbs.so.1`): each case
//! gets the documented errno or completion error, and nothing crashes. And
//! non-blocking event descriptors (`tests/c/nonblocking_events.c`).

use std::process::Command;
use std::time::{Duration, Instant};
use uroce_tests::ibverbs::{finish, library_dir, on_uroce, require, tool};

/// Builds the C program `name` (`source`) against Debian's headers and runs
/// it on the library; `None` (the test skipped) without the headers or gcc.
fn run_c(test: &str, name: &str, source: &str, ip: &str) -> Option<String> {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !require(test, header.exists(), "no <infiniband/verbs.h> (libibverbs-dev)")
        || !require(test, tool("gcc").is_some(), "no gcc")
    {
        return None;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(format!("{name}.c"));
    let binary = dir.path().join(name);
    std::fs::write(&path, source).expect("write the C program");
    let helpers = include_str!("../c/verbs_helpers.h");
    std::fs::write(dir.path().join("verbs_helpers.h"), helpers).expect("write the helpers");
    let built = Command::new("gcc")
        .arg("-o")
        .arg(&binary)
        .arg(&path)
        .arg("-libverbs")
        .output()
        .expect("run gcc");
    assert!(built.status.success(), "gcc: {}", String::from_utf8_lossy(&built.stderr));
    let lib = library_dir().expect("cargo builds libibverbs.so beside the tests");
    let child = on_uroce(&binary, &lib, ip).spawn().expect("run the C program");
    let end = finish(child, Instant::now() + Duration::from_secs(30));
    assert_eq!(end.code, Some(0), "{end:#?}");
    Some(end.stdout)
}

/// The result printed for case `name`.
fn case(stdout: &str, name: &str) -> String {
    let prefix = format!("case {name} ");
    let line = stdout.lines().find(|l| l.starts_with(&prefix));
    line.unwrap_or_else(|| panic!("no case {name}: {stdout}"))[prefix.len()..].to_string()
}

#[test]
fn misuse_from_c_gets_the_documented_errors() {
    let test = "misuse_from_c_gets_the_documented_errors";
    let source = include_str!("../c/verbs_misuse.c");
    let Some(out) = run_c(test, "verbs_misuse", source, "127.115.0.1") else { return };
    let case = |name: &str| case(&out, name);
    // Posting to a QP in RESET: EINVAL (rxe leaves *bad_wr NULL; uroce
    // names the WR, as libibverbs documents for a WR that failed).
    assert!(["22 wr", "22 null"].contains(&case("post_send_reset").as_str()));
    assert_eq!(case("post_recv_reset"), "22");
    // Destroying a CQ a QP uses, deallocating a PD in use: EBUSY.
    assert_eq!(case("destroy_cq_in_use"), "16");
    assert_eq!(case("dealloc_pd_in_use"), "16");
    // A state that does not exist, an illegal transition: EINVAL.
    assert_eq!(case("modify_bad_state"), "22");
    assert_eq!(case("modify_reset_to_rts"), "22");
    // A QP connected to itself on the same device works.
    assert_eq!(case("connect_to_itself"), "0");
    // Three WRs on a send queue of two: ENOMEM, *bad_wr the third.
    assert_eq!(case("post_send_overflow"), "12 2");
    assert_eq!(case("write_to_itself"), "2 0 0");
    // A bad lkey: posted, then a local protection error completion.
    assert_eq!(case("bad_lkey"), "0 1 local protection error");
    // A type-1 window: bound (a completion, a new R_Key), written through.
    assert_eq!(case("bind_mw"), "0 1 0 new_rkey");
    assert_eq!(case("write_through_mw"), "0 1 0 x");
    assert_eq!(case("dealloc_mw"), "0");
    // One buffer registered twice (ibv_reg_mr, other rights): two
    // regions, each usable (a SEND to itself gathers through one and
    // scatters through the other); deregistering one leaves the other.
    assert_eq!(case("reg_mr_twice"), "mr new_lkey");
    assert_eq!(case("send_through_both"), "0 2 0 twice");
    assert_eq!(case("dereg_one_of_two"), "0 2 0 again");
    // A chain with a WR that cannot be converted (a bad opcode, a negative
    // SGE count): EINVAL, *bad_wr that WR, the ones before it posted.
    assert_eq!(case("post_send_bad_opcode"), "0 22 1 2 0 again");
    assert_eq!(case("post_recv_bad_sge_count"), "22 1");
    // ibv_create_srq_ex: a basic SRQ; an XRC one is refused.
    assert_eq!(case("create_srq_ex"), "srq 0");
    assert_eq!(case("create_srq_ex_xrc"), "null 95");
    // ibv_resize_cq: the new depth in cq->cqe; 0 is EINVAL, cqe unchanged.
    assert_eq!(case("resize_cq"), "0 32");
    assert_eq!(case("resize_cq_zero"), "22 32");
    // Multicast: rxe's limits; an RC QP or a unicast GID is EINVAL; a UD
    // QP attaches (twice is harmless), detaches once (then EINVAL), and is
    // destroyed attached.
    assert_eq!(case("mcast_limits"), format!("0 8192 56 {}", 8192 * 56));
    assert_eq!(case("attach_mcast_rc"), "22");
    assert_eq!(case("attach_mcast_ud"), "0 0");
    assert_eq!(case("attach_mcast_unicast"), "22");
    assert_eq!(case("detach_mcast"), "0 22");
    assert_eq!(case("destroy_attached"), "0 0");
    assert_eq!(case("teardown"), "0");
}

#[test]
fn nonblocking_event_descriptors_answer_eagain() {
    let test = "nonblocking_event_descriptors_answer_eagain";
    let source = include_str!("../c/nonblocking_events.c");
    let Some(out) = run_c(test, "nonblocking_events", source, "127.115.0.2") else { return };
    let case = |name: &str| case(&out, name);
    // A channel starts blocking, as rdma-core's; made O_NONBLOCK with
    // nothing ready, ibv_get_cq_event is -1 with EAGAIN.
    assert_eq!(case("channel_starts_blocking"), "0");
    assert_eq!(case("cq_event_eagain"), "0 -1 11");
    // After a signalled write, poll() sees it readable and the event names
    // the CQ and its context.
    assert_eq!(case("cq_event_after_poll"), "0 1 0 cq ctx");
    assert_eq!(case("completion"), "1 0 7");
    assert_eq!(case("cq_event_eagain_again"), "-1 11");
    // The async descriptor is readable exactly while an asynchronous event
    // waits: while the port's PORT_ACTIVE does, not once it is taken (an
    // SRQ limit armed included), readable when the device raises the SRQ's
    // limit event while the program sleeps in poll(), ibv_get_async_event
    // then returns it, and not readable after.
    assert_eq!(case("async_fd_idle"), "1 0");
    assert_eq!(case("async_fd_armed_idle"), "0 0");
    assert_eq!(case("async_fd_srq_limit"), "0 1 1 0 srq_limit srq");
    assert_eq!(case("async_fd_drained"), "0 0");
    // The async descriptor made O_NONBLOCK: EAGAIN while no event waits.
    assert_eq!(case("async_event_eagain"), "0 -1 11");
    assert_eq!(case("teardown"), "0");
}
