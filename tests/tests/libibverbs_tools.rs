//! Debian's rdma-core tools, unmodified, on uroce's `libibverbs.so.1`:
//! `ibv_devices`, `ibv_devinfo -v`, and the pingpongs as two processes
//! (each its own device, 127.113.x.1 and .2, and TCP port).

use std::path::PathBuf;
use uroce_tests::ibverbs::{
    finish, library_dir, on_uroce, require, run_pair, run_pair_env, tool, Ended,
};

/// The tool and the library directory, or None (the test skips).
fn setup(test: &str, name: &str) -> Option<(PathBuf, PathBuf)> {
    let program = tool(name);
    if !require(test, program.is_some(), &format!("no {name} (Debian's ibverbs-utils)")) {
        return None;
    }
    let dir = library_dir().expect("cargo builds libibverbs.so beside the tests");
    Some((program.expect("checked"), dir))
}

fn run_one(name: &str, net_addr: &str, args: &[&str], test: &str) -> Option<Ended> {
    let (program, dir) = setup(test, name)?;
    let child = on_uroce(&program, &dir, net_addr).args(args).spawn().expect("start the tool");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    Some(finish(child, deadline))
}

#[test]
fn ibv_devices_lists_uroce0() {
    let Some(end) = run_one("ibv_devices", "127.113.0.1", &[], "ibv_devices_lists_uroce0") else {
        return;
    };
    assert_eq!(end.code, Some(0), "{end:#?}");
    let line = end.stdout.lines().find(|l| l.contains("uroce0")).expect("uroce0 listed");
    // The node GUID is the EUI-64 of the link-local GID (MAC 02:00:7f:71:00:01).
    assert!(line.trim_end().ends_with("00007ffffe710001"), "{line}");
}

#[test]
fn ibv_devinfo_v_describes_the_device() {
    let test = "ibv_devinfo_v_describes_the_device";
    let Some(end) = run_one("ibv_devinfo", "127.113.0.2", &["-v"], test) else { return };
    assert_eq!(end.code, Some(0), "{end:#?}");
    for needle in [
        "hca_id:\turoce0",
        "transport:\t\t\tInfiniBand (0)",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        "GID[  0]:\t\tfe80::",
        "GID[  1]:\t\t::ffff:127.113.0.2, RoCE v2",
    ] {
        assert!(end.stdout.contains(needle), "`{needle}` missing:\n{}", end.stdout);
    }
}

/// Runs `name` as two processes with `flags` and checks both ends.
fn pingpong(test: &str, name: &str, net: &str, port: u16, flags: &[&str]) {
    let Some((program, dir)) = setup(test, name) else { return };
    let mut all = vec!["-g", "1"];
    all.extend_from_slice(flags);
    let (server, client) = run_pair(&program, &dir, net, port, &all);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(
            end.code,
            Some(0),
            "{who} of {name} {flags:?} failed:\n{server:#?}\n{client:#?}"
        );
        assert!(end.stdout.contains("local address:"), "{who}: {end:#?}");
        assert!(end.stdout.contains(" iters in "), "{who}: {end:#?}");
    }
}

#[test]
fn ibv_rc_pingpong() {
    pingpong("ibv_rc_pingpong", "ibv_rc_pingpong", "127.113.1", 18711, &[]);
}

#[test]
fn ibv_rc_pingpong_checked() {
    pingpong("ibv_rc_pingpong_checked", "ibv_rc_pingpong", "127.113.2", 18712, &["-c"]);
}

#[test]
fn ibv_rc_pingpong_events() {
    pingpong("ibv_rc_pingpong_events", "ibv_rc_pingpong", "127.113.3", 18713, &["-e", "-n", "200"]);
}

#[test]
fn ibv_rc_pingpong_new_send_api() {
    // -N: ibv_create_qp_ex, ibv_qp_to_qp_ex and the ibv_wr_* calls.
    let test = "ibv_rc_pingpong_new_send_api";
    pingpong(test, "ibv_rc_pingpong", "127.113.8", 18720, &["-N", "-c", "-n", "200"]);
}

#[test]
fn ibv_rc_pingpong_sizes() {
    let test = "ibv_rc_pingpong_sizes";
    pingpong(test, "ibv_rc_pingpong", "127.113.4", 18714, &["-s", "1", "-n", "200", "-c"]);
    pingpong(test, "ibv_rc_pingpong", "127.113.4", 18715, &["-s", "65536", "-n", "100", "-c"]);
}

#[test]
fn ibv_uc_pingpong() {
    pingpong("ibv_uc_pingpong", "ibv_uc_pingpong", "127.113.5", 18716, &["-c", "-e", "-n", "300"]);
}

#[test]
fn ibv_ud_pingpong() {
    pingpong("ibv_ud_pingpong", "ibv_ud_pingpong", "127.113.6", 18717, &["-c", "-n", "300"]);
    pingpong("ibv_ud_pingpong", "ibv_ud_pingpong", "127.113.6", 18718, &["-e", "-n", "300"]);
}

#[test]
fn ibv_srq_pingpong() {
    pingpong(
        "ibv_srq_pingpong",
        "ibv_srq_pingpong",
        "127.113.7",
        18719,
        &["-c", "-e", "-n", "300"],
    );
}

#[test]
fn ibv_rc_pingpong_over_a_lossy_link() {
    // 5 % of the packets each side sends are lost: go-back-N recovers, and
    // the last ACK is answered again after the program's last completion
    // (the library stays for the peer's retransmissions before a QP goes).
    let test = "ibv_rc_pingpong_over_a_lossy_link";
    let Some((program, dir)) = setup(test, "ibv_rc_pingpong") else { return };
    let flags = ["-g", "1", "-n", "100", "-c"];
    let env = [("UROCE_FAULTS", "loss=0.05")];
    let (server, client) = run_pair_env(&program, &dir, "127.113.9", 18721, &flags, &env);
    for (who, end) in [("server", &server), ("client", &client)] {
        assert_eq!(end.code, Some(0), "{who} failed:\n{server:#?}\n{client:#?}");
    }
}
