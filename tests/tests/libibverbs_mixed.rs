//! Mixed pairs: Debian's `ibv_rc_pingpong` and perftest on uroce's `libibverbs.so.1`
//! against `uroce pingpong` and `uroce perftest` (the Rust tools on `uroce-verbs`), each side in
//! either role, two processes (127.116.x.1 and .2).

use std::time::{Duration, Instant};
use uroce_tests::child;
use uroce_tests::ibverbs::{finish, library_dir, listening, on_uroce, require, tool};

const CHILD_ENV: &str = "UROCE_LIBIBVERBS_MIXED_CHILD";

/// The child: runs `uroce` with the arguments in [`CHILD_ENV`].
#[test]
fn mixed_child() {
    child::run_if_child(CHILD_ENV);
}

fn uroce(addr: &str, args: &[&str]) -> child::Running {
    child::spawn("mixed_child", CHILD_ENV, args, &[("UROCE_ADDR", addr.to_string())])
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !listening(port) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn ibv_rc_pingpong_against_uroce_pingpong() {
    let test = "ibv_rc_pingpong_against_uroce_pingpong";
    let program = tool("ibv_rc_pingpong");
    if !require(test, program.is_some(), "no ibv_rc_pingpong (Debian's ibverbs-utils)") {
        return;
    }
    let program = program.expect("checked");
    let dir = library_dir().expect("cargo builds libibverbs.so beside the tests");
    let flags = ["-g", "1", "-n", "200", "-s", "4096"];

    // The C tool serves, uroce pingpong connects.
    let (port, server_addr) = (18911u16, "127.116.1.1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = on_uroce(&program, &dir, server_addr)
        .args(flags)
        .args(["-p", &port.to_string()])
        .spawn()
        .expect("start ibv_rc_pingpong");
    wait_listening(port);
    let mut args = vec!["pingpong", "-p", "18911"];
    args.extend_from_slice(&flags);
    args.push(server_addr);
    let client = uroce("127.116.1.2", &args).finish(deadline);
    let server = finish(server, deadline);
    assert_eq!(server.code, Some(0), "C server: {server:#?}\nuroce client: {client:#?}");
    assert_eq!(client.code, Some(0), "C server: {server:#?}\nuroce client: {client:#?}");

    // uroce pingpong serves, the C tool connects.
    let (port, server_addr) = (18912u16, "127.116.2.1");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut args = vec!["pingpong", "-p", "18912", "--accept-timeout", "20"];
    args.extend_from_slice(&flags);
    let server = uroce(server_addr, &args);
    wait_listening(port);
    let client = on_uroce(&program, &dir, "127.116.2.2")
        .args(flags)
        .args(["-p", &port.to_string(), server_addr])
        .spawn()
        .expect("start ibv_rc_pingpong");
    let client = finish(client, deadline);
    let server = server.finish(deadline);
    assert_eq!(server.code, Some(0), "uroce server: {server:#?}\nC client: {client:#?}");
    assert_eq!(client.code, Some(0), "uroce server: {server:#?}\nC client: {client:#?}");
}

#[test]
fn perftest_against_uroce_perftest() {
    let test = "perftest_against_uroce_perftest";
    let (write, send) = (tool("ib_write_bw"), tool("ib_send_bw"));
    if !require(test, write.is_some() && send.is_some(), "no ib_write_bw / ib_send_bw (perftest)") {
        return;
    }
    let dir = library_dir().expect("cargo builds libibverbs.so beside the tests");

    // Debian's ib_write_bw serves on the library, uroce perftest connects.
    let deadline = Instant::now() + Duration::from_secs(60);
    let server = on_uroce(&write.expect("checked"), &dir, "127.116.3.1")
        .args(["-x", "1", "-s", "4096", "-n", "200", "-p", "18913"])
        .spawn()
        .expect("start ib_write_bw");
    wait_listening(18913);
    let args = ["perftest", "write_bw", "-x", "1", "-s", "4096", "-n", "200", "-p", "18913"];
    let mut args = args.to_vec();
    args.push("127.116.3.1");
    let client = uroce("127.116.3.2", &args).finish(deadline);
    let server = finish(server, deadline);
    assert_eq!(server.code, Some(0), "C server: {server:#?}\nuroce client: {client:#?}");
    assert_eq!(client.code, Some(0), "C server: {server:#?}\nuroce client: {client:#?}");

    // uroce perftest serves, Debian's ib_send_bw on the library connects.
    let deadline = Instant::now() + Duration::from_secs(60);
    let args = ["perftest", "send_bw", "-x", "1", "-s", "4096", "-n", "200", "-p", "18914"];
    let server = uroce("127.116.4.1", &args);
    wait_listening(18914);
    let client = on_uroce(&send.expect("checked"), &dir, "127.116.4.2")
        .args(["-x", "1", "-s", "4096", "-n", "200", "-p", "18914", "127.116.4.1"])
        .spawn()
        .expect("start ib_send_bw");
    let client = finish(client, deadline);
    let server = server.finish(deadline);
    assert_eq!(server.code, Some(0), "uroce server: {server:#?}\nC client: {client:#?}");
    assert_eq!(client.code, Some(0), "uroce server: {server:#?}\nC client: {client:#?}");
}
