//! Debian's perftest, unmodified, on uroce's `libibverbs.so.1`: each tool
//! as two processes (127.114.x.1 and .2, a TCP port each), RoCE v2 GID
//! index 1, several sizes. perftest's binaries also load libmlx5, libefa
//! and librdmacm, which must resolve against the library.

use uroce_tests::ibverbs::{library_dir, require, run_pair, tool};

/// Runs `name` as two processes with `flags`; checks both ends and that
/// the client printed its result table.
fn perftest(name: &str, net: &str, port: u16, flags: &[&str]) {
    let program = tool(name);
    if !require(name, program.is_some(), &format!("no {name} (Debian's perftest)")) {
        return;
    }
    let dir = library_dir().expect("cargo builds libibverbs.so beside the tests");
    let mut all = vec!["-x", "1"];
    all.extend_from_slice(flags);
    let (server, client) = run_pair(&program.expect("checked"), &dir, net, port, &all);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(
            end.code,
            Some(0),
            "{who} of {name} {flags:?} failed:\n{server:#?}\n{client:#?}"
        );
    }
    assert!(client.stdout.contains("#bytes"), "no result table: {client:#?}");
}

#[test]
fn ib_write_bw() {
    perftest("ib_write_bw", "127.114.1", 18811, &["-s", "65536", "-n", "100"]);
    perftest("ib_write_bw", "127.114.1", 18812, &["-s", "1", "-n", "100"]);
}

#[test]
fn ib_send_bw() {
    perftest("ib_send_bw", "127.114.2", 18813, &["-s", "4096", "-n", "100"]);
    perftest("ib_send_bw", "127.114.2", 18814, &["-s", "9000", "-n", "100"]);
}

#[test]
fn ib_read_bw() {
    perftest("ib_read_bw", "127.114.3", 18815, &["-s", "65536", "-n", "100"]);
}

#[test]
fn ib_atomic_bw() {
    perftest("ib_atomic_bw", "127.114.4", 18816, &["-n", "100"]);
    perftest("ib_atomic_bw", "127.114.4", 18817, &["-A", "CMP_AND_SWAP", "-n", "100"]);
}

#[test]
fn ib_send_lat() {
    perftest("ib_send_lat", "127.114.5", 18818, &["-s", "64", "-n", "100"]);
}

#[test]
fn ib_write_lat() {
    perftest("ib_write_lat", "127.114.6", 18819, &["-s", "64", "-n", "100"]);
}

#[test]
fn ib_read_lat() {
    perftest("ib_read_lat", "127.114.7", 18820, &["-s", "4096", "-n", "100"]);
}
