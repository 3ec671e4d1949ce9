//! The order of perftest 4.5-0.17's exchange, one side of it, with the
//! RDMA work behind a trait so that the order can be tested against the
//! captured exchanges without a device.
//!
//! ```text
//! version (16 B), cycle buffer (4 B), cache line (4 B), MTU (2 B)
//! send_bw:               keys per QP, [connect], sync, keys per QP,
//!                        per size: [server posts receives] sync, traffic, [-a: sync]
//!                        sync, done
//! write/read/atomic_bw:  keys per QP, keys per QP, [connect], sync,
//!                        client: traffic for every size; server: waits
//!                        sync, the client's report (5 x 8 B), sync, done
//! ```
//!
//! "keys" and "sync" are both `ctx_hand_shake`, an exchange of a QP's
//! 108-byte address: a sync sends QP 0's again. Every later copy of an
//! address must equal the first.

use super::report::{self, Measured, RESULT_LINE};
use super::wire::{self, BwReport, Channel, Dest, Role};
use super::{Plan, Verb};
use std::io::Write;
use uroce_verbs::Mtu;

/// What both ends agreed on before the QPs exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// Bytes the cycling addresses stay within (the larger page size).
    pub cycle_buffer: u32,
    /// Address step unit (the larger cache line).
    pub cache_line: u32,
    /// Path MTU (the smaller of the two ports').
    pub mtu: Mtu,
    /// The message sizes to run, in order.
    pub sizes: Vec<u32>,
}

/// The RDMA side of a session.
pub trait Traffic {
    /// This side's QP addresses.
    fn my_dests(&self) -> Vec<Dest>;
    /// Brings the QPs to RTS towards the peer's QPs.
    fn connect(&mut self, peers: &[Dest]) -> Result<(), String>;
    /// The SEND server: posts the first receives of a size.
    fn post_receives(&mut self, size: u32) -> Result<(), String>;
    /// The SEND server: takes every message of a size.
    fn receive(&mut self, size: u32) -> Result<Measured, String>;
    /// The client: runs every operation of a size.
    fn send(&mut self, size: u32) -> Result<Measured, String>;
    /// The server of a WRITE, READ or atomic test, once the client is done
    /// (`report` is what it measured): checks the target memory.
    fn check_target(&mut self, report: &BwReport) -> Result<(), String>;
}

/// Runs one side of the session after the connection is made. `open`
/// creates the RDMA side once the sizes and MTU are agreed; `own_mtu` is
/// this port's (or `-m`'s). Prints perftest's lines to `out`.
pub fn run<T: Traffic>(
    plan: &Plan,
    own_mtu: Mtu,
    mut ch: Channel,
    open: impl FnOnce(&Agreed) -> Result<T, String>,
    out: &mut dyn Write,
) -> Result<(), String> {
    let role = ch.role();
    let peer_version = ch.exchange(&wire::version_message(), "version")?;
    wire::check_version(&peer_version)?;
    let cycle = ch.exchange(&wire::sys_data_message(plan.cycle_buffer), "cycle buffer size")?;
    let cycle_buffer = wire::parse_cycle_buffer(&cycle)?.max(plan.cycle_buffer);
    let line = ch.exchange(&wire::sys_data_message(plan.cache_line), "cache line size")?;
    let cache_line = wire::parse_cache_line(&line)?.max(plan.cache_line);
    let peer_mtu = wire::parse_mtu(&ch.exchange(&wire::mtu_message(own_mtu), "MTU")?)?;
    let mtu = if peer_mtu.bytes() < own_mtu.bytes() { peer_mtu } else { own_mtu };
    let agreed = Agreed { cycle_buffer, cache_line, mtu, sizes: plan.sizes(mtu)? };
    let mut traffic = open(&agreed)?;
    let mine = traffic.my_dests();
    let print = |out: &mut dyn Write, text: &str| {
        writeln!(out, "{text}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
    };
    print(out, &report::banner(plan, mtu.bytes(), mine[0].out_reads, &plan.device))?;

    let mut peers = Vec::with_capacity(mine.len());
    for (i, dest) in mine.iter().enumerate() {
        peers.push(ch.hand_shake(dest, &format!("address of QP #{i}"))?);
    }
    check_peers(&mine, &peers)?;
    let keys_again = |ch: &mut Channel, peers: &[Dest]| -> Result<(), String> {
        for (i, dest) in mine.iter().enumerate() {
            let again = ch.hand_shake(dest, &format!("address of QP #{i}"))?;
            same(&again, &peers[i], &format!("address of QP #{i}"))?;
        }
        Ok(())
    };
    let sync = |ch: &mut Channel, what: &str| -> Result<(), String> {
        let again = ch.hand_shake(&mine[0], what)?;
        same(&again, &peers[0], what)
    };
    if plan.verb == Verb::Send {
        traffic.connect(&peers)?;
        sync(&mut ch, "synchronisation after connecting")?;
        keys_again(&mut ch, &peers)?;
    } else {
        keys_again(&mut ch, &peers)?;
        traffic.connect(&peers)?;
        sync(&mut ch, "synchronisation after connecting")?;
    }
    for (side, dests) in [("local", &mine), ("remote", &peers)] {
        for d in dests.iter() {
            print(out, &report::address(side, d, plan.verb))?;
        }
    }
    print(out, &format!("{RESULT_LINE}\n{}", plan.unit.header()))?;

    match (plan.verb, role) {
        (Verb::Send, _) => {
            for &size in &agreed.sizes {
                if role == Role::Server {
                    traffic.post_receives(size)?;
                }
                sync(&mut ch, "synchronisation before the measurement")?;
                let measured = match role {
                    Role::Client => traffic.send(size)?,
                    Role::Server => traffic.receive(size)?,
                };
                print(out, &report::row(&measured.report(plan.unit)))?;
                if plan.all_sizes {
                    sync(&mut ch, "synchronisation after the measurement")?;
                }
            }
            sync(&mut ch, "synchronisation before closing")?;
        }
        (_, Role::Client) => {
            let mut last = BwReport::default();
            for &size in &agreed.sizes {
                last = traffic.send(size)?.report(plan.unit);
                print(out, &report::row(&last))?;
            }
            sync(&mut ch, "synchronisation after the measurement")?;
            for (field, name) in last.to_wire().iter().zip(REPORT_FIELDS) {
                ch.exchange(field, name)?;
            }
            sync(&mut ch, "synchronisation before closing")?;
        }
        (_, Role::Server) => {
            sync(&mut ch, "synchronisation after the client's measurement")?;
            // perftest's passive side sends whatever its report holds; ours
            // is empty.
            let mut fields = [[0u8; wire::REPORT_FIELD_LEN]; 5];
            for (field, name) in fields.iter_mut().zip(REPORT_FIELDS) {
                let theirs = ch.exchange(&[0; wire::REPORT_FIELD_LEN], name)?;
                field.copy_from_slice(&theirs);
            }
            let theirs = BwReport::from_wire(&fields);
            check_report(plan, &agreed, &theirs)?;
            traffic.check_target(&theirs)?;
            print(out, &report::row(&theirs))?;
            sync(&mut ch, "synchronisation before closing")?;
        }
    }
    print(out, RESULT_LINE)?;
    ch.finish()
}

/// The five report exchanges, for error messages.
const REPORT_FIELDS: [&str; 5] = [
    "report's message size",
    "report's iteration count",
    "report's peak bandwidth",
    "report's average bandwidth",
    "report's message rate",
];

/// The peer's addresses must be usable: a QPN, and a GID of the same
/// family as ours (perftest's `ctx_check_gid_compatibility`).
fn check_peers(mine: &[Dest], peers: &[Dest]) -> Result<(), String> {
    let v4 = |d: &Dest| d.gid.0[..10].iter().all(|&b| b == 0) && d.gid.0[10..12] == [0xff, 0xff];
    if v4(&mine[0]) != v4(&peers[0]) {
        return Err(format!(
            "Found Incompatibility issue with GID types: this side's GID is {}, the peer's {}; \
             use the same IP version on both sides (-x)",
            mine[0].gid, peers[0].gid
        ));
    }
    if let Some((i, p)) = peers.iter().enumerate().find(|(_, p)| p.qpn < 2) {
        return Err(format!("the peer's QP #{i} has QPN {:#x}, which cannot be used", p.qpn));
    }
    Ok(())
}

/// A repeated address must be the first one again.
fn same(again: &Dest, first: &Dest, what: &str) -> Result<(), String> {
    if again == first {
        Ok(())
    } else {
        Err(format!(
            "the peer's {what} differs from its first address ({} after {}): the two sides are \
             out of step (different tests or flags?)",
            wire::escape(&again.to_wire()),
            wire::escape(&first.to_wire())
        ))
    }
}

/// The client's report must describe this test: the last size, and every
/// QP's iterations.
fn check_report(plan: &Plan, agreed: &Agreed, r: &BwReport) -> Result<(), String> {
    let size = u64::from(*agreed.sizes.last().unwrap_or(&0));
    let iters = u64::from(plan.iters) * u64::from(plan.qps);
    if r.size != size || r.iters != iters {
        return Err(format!(
            "the client reports {} messages of {} bytes; this server expects {iters} of {size} \
             (run both sides with the same -s, -n and -q)",
            r.iters, r.size
        ));
    }
    if ![r.peak, r.average, r.msg_rate].iter().all(|v| v.is_finite() && *v >= 0.0) {
        return Err(format!(
            "the client's report is not a measurement: peak {}, average {}, rate {}",
            r.peak, r.average, r.msg_rate
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::OobStream;
    use crate::perftest::wire::tests::{vector, Vector};
    use crate::perftest::wire::{KEY_LEN, VERSION_LEN};
    use crate::perftest::PerftestArgs;
    use clap::Parser;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;
    use uroce_verbs::Gid;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        args: PerftestArgs,
    }

    fn plan(flags: &str) -> Plan {
        let argv = std::iter::once("perftest").chain(flags.split_whitespace());
        let mut plan = Plan::resolve(&Flags::parse_from(argv).args).expect("flags");
        plan.device = "test".into();
        plan
    }

    /// RDMA that is not there: fixed addresses and measurements, and a log.
    struct Fake {
        dests: Vec<Dest>,
        log: Vec<String>,
    }

    impl Fake {
        fn new(qps: u32, out_reads: u16) -> Fake {
            let dests = (0..qps)
                .map(|i| Dest {
                    lid: 0,
                    out_reads,
                    qpn: 0x20 + i,
                    psn: 0x12_3456 + i,
                    rkey: 0x1234,
                    vaddr: 0x7000_0000 + u64::from(i) * 0x1_0000,
                    gid: Gid::from_ip("127.88.1.1".parse().unwrap()),
                    srqn: 0,
                })
                .collect();
            Fake { dests, log: Vec::new() }
        }

        fn measured(size: u32, iters: u64) -> Measured {
            Measured { size, iters, elapsed_ns: 1_000_000, ..Measured::default() }
        }
    }

    impl Traffic for &mut Fake {
        fn my_dests(&self) -> Vec<Dest> {
            self.dests.clone()
        }
        fn connect(&mut self, peers: &[Dest]) -> Result<(), String> {
            self.log.push(format!("connect {}", peers.len()));
            Ok(())
        }
        fn post_receives(&mut self, size: u32) -> Result<(), String> {
            self.log.push(format!("post_receives {size}"));
            Ok(())
        }
        fn receive(&mut self, size: u32) -> Result<Measured, String> {
            self.log.push(format!("receive {size}"));
            Ok(Fake::measured(size, 100))
        }
        fn send(&mut self, size: u32) -> Result<Measured, String> {
            self.log.push(format!("send {size}"));
            Ok(Fake::measured(size, 100))
        }
        fn check_target(&mut self, report: &BwReport) -> Result<(), String> {
            self.log.push(format!("check_target {} {}", report.size, report.iters));
            Ok(())
        }
    }

    /// A connected pair of kernel TCP streams on this test's addresses.
    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.88.250.1:0").expect("listen");
        let a = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
        let (b, _) = listener.accept().expect("accept");
        (a, b)
    }

    /// The peer's side of a captured exchange: writes the peer's messages
    /// and reads ours, which must have the captured lengths; the fixed ones
    /// (version, sys data, MTU, done) must be the captured bytes, and every
    /// address must read.
    fn play_peer(mut stream: TcpStream, v: &Vector, ours: Role) -> Result<(), String> {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for (i, (role, msg)) in v.messages.iter().enumerate() {
            if *role != ours {
                stream.write_all(msg).map_err(|e| format!("message {i}: {e}"))?;
                continue;
            }
            let mut got = vec![0u8; msg.len()];
            stream.read_exact(&mut got).map_err(|e| format!("message {i}: {e}"))?;
            let fixed = matches!(msg.len(), VERSION_LEN | 4 | 2 | 5);
            if fixed && got != *msg {
                return Err(format!(
                    "message {i}: {} instead of {}",
                    wire::escape(&got),
                    wire::escape(msg)
                ));
            }
            if msg.len() == KEY_LEN {
                Dest::from_wire(&got).map_err(|e| format!("message {i}: {e}"))?;
            }
        }
        // Nothing more may come.
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        if rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{} bytes after the end: {}", rest.len(), wire::escape(&rest)))
        }
    }

    /// Runs our `role` against the capture `name` with `flags`; returns
    /// what we printed and the traffic log.
    fn replay(name: &str, role: Role, flags: &str) -> (String, Vec<String>) {
        let v = vector(name);
        let plan = plan(flags);
        let (ours, theirs) = tcp_pair();
        let peer = std::thread::spawn(move || play_peer(theirs, &v, role));
        let ch = Channel::new(OobStream::Tcp(ours), role, Duration::from_secs(10), Box::new(|| 0));
        let mut fake = Fake::new(plan.qps, if plan.verb == Verb::Send { 1 } else { 128 });
        let mut out = Vec::new();
        let result = run(&plan, Mtu::Mtu1024, ch, |_| Ok(&mut fake), &mut out);
        let out = String::from_utf8(out).unwrap();
        assert_eq!(result, Ok(()), "{name} as {role:?}:\n{out}");
        peer.join().unwrap().unwrap_or_else(|e| panic!("{name} as {role:?}: {e}\n{out}"));
        (out, fake.log)
    }

    #[test]
    fn servers_follow_the_captured_clients() {
        let (out, log) = replay("send_bw", Role::Server, "send_bw -n 100 -s 4096");
        assert_eq!(log, ["connect 1", "post_receives 4096", "receive 4096"]);
        assert!(out.contains(" 4096       100              0.00"), "{out}");
        let (_, log) = replay("send_bw_q2", Role::Server, "send_bw -n 20 -s 1024 -q 2");
        assert_eq!(log, ["connect 2", "post_receives 1024", "receive 1024"]);
        let (_, log) = replay("send_bw_ud", Role::Server, "send_bw -n 100 -s 512 -c UD");
        assert_eq!(log, ["connect 1", "post_receives 512", "receive 512"]);
        let (_, log) = replay("send_bw_a", Role::Server, "send_bw -n 5 -a");
        assert_eq!(log.len(), 1 + 2 * 23);
        assert_eq!(log.last().unwrap(), "receive 8388608");
        // The passive servers print the client's report exactly as the VM's
        // server printed it.
        for (name, flags) in [
            ("write_bw", "write_bw -n 100 -s 4096"),
            ("write_bw_q2", "write_bw -n 20 -s 1024 -q 2"),
            ("write_bw_uc", "write_bw -n 100 -s 4096 -c UC"),
            ("read_bw", "read_bw -n 100 -s 4096"),
            ("atomic_bw", "atomic_bw -n 100"),
            ("atomic_cas_bw", "atomic_bw -n 100 -A CMP_AND_SWAP"),
        ] {
            let (out, log) = replay(name, Role::Server, flags);
            let qps = plan(flags).qps;
            let size = if name.starts_with("atomic") { 8 } else { plan(flags).size };
            let iters = u64::from(plan(flags).iters * qps);
            assert_eq!(log, [format!("connect {qps}"), format!("check_target {size} {iters}")]);
            let server_line = vector(name).server_line;
            assert!(out.lines().any(|l| l == server_line), "{name}: no `{server_line}` in\n{out}");
        }
    }

    #[test]
    fn clients_follow_the_captured_servers() {
        let (out, log) = replay("send_bw", Role::Client, "send_bw -n 100 -s 4096 127.0.0.1");
        assert_eq!(log, ["connect 1", "send 4096"]);
        assert!(out.contains(RESULT_FMT_HEADER), "{out}");
        replay("send_bw_q2", Role::Client, "send_bw -n 20 -s 1024 -q 2 127.0.0.1");
        replay("send_bw_ud", Role::Client, "send_bw -n 100 -s 512 -c UD 127.0.0.1");
        let (_, log) = replay("send_bw_a", Role::Client, "send_bw -n 5 -a 127.0.0.1");
        assert_eq!(log.len(), 1 + 23);
        for (name, flags) in [
            ("write_bw", "write_bw -n 100 -s 4096 127.0.0.1"),
            ("write_bw_q2", "write_bw -n 20 -s 1024 -q 2 127.0.0.1"),
            ("write_bw_uc", "write_bw -n 100 -s 4096 -c UC 127.0.0.1"),
            ("read_bw", "read_bw -n 100 -s 4096 127.0.0.1"),
            ("atomic_bw", "atomic_bw -n 100 127.0.0.1"),
        ] {
            let (_, log) = replay(name, Role::Client, flags);
            assert_eq!(log[0], format!("connect {}", plan(flags).qps), "{name}");
        }
    }

    const RESULT_FMT_HEADER: &str = report::RESULT_FMT;

    /// Runs our `role` against a peer that sends `script` and then closes
    /// its side; returns our error.
    fn against(role: Role, flags: &str, script: Vec<u8>, timeout: Duration) -> String {
        let plan = plan(flags);
        let (ours, mut theirs) = tcp_pair();
        let peer = std::thread::spawn(move || {
            let _ = theirs.write_all(&script);
            let _ = theirs.shutdown(std::net::Shutdown::Write);
            // Read what comes until we are closed (or give up).
            theirs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut sink = Vec::new();
            let _ = theirs.read_to_end(&mut sink);
        });
        let ch = Channel::new(OobStream::Tcp(ours), role, timeout, Box::new(|| 0));
        let mut fake = Fake::new(1, 1);
        let started = std::time::Instant::now();
        let result = run(&plan, Mtu::Mtu1024, ch, |_| Ok(&mut fake), &mut Vec::new());
        assert!(started.elapsed() < timeout + Duration::from_secs(3), "{:?}", started.elapsed());
        peer.join().unwrap();
        result.expect_err("a bad peer must fail the run")
    }

    #[test]
    fn a_bad_peer_fails_the_run_with_a_reason() {
        let v = vector("send_bw");
        let client = |n: usize| -> Vec<u8> {
            v.messages
                .iter()
                .filter(|(r, _)| *r == Role::Client)
                .take(n)
                .flat_map(|(_, m)| m.clone())
                .collect()
        };
        let second = Duration::from_secs(1);
        let e =
            against(Role::Server, "send_bw", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), second);
        assert!(e.contains("not a perftest version"), "{e}");
        let mut old = b"5.5".to_vec();
        old.resize(16, 0);
        let e = against(Role::Server, "send_bw", old, second);
        assert!(e.contains("older than 5.70"), "{e}");
        let e = against(Role::Server, "send_bw", Vec::new(), second);
        assert!(e.contains("closed the connection"), "{e}");
        // A client that stops after its MTU message: the keys never come.
        let e = against(Role::Server, "send_bw", client(4), second);
        assert!(e.contains("closed the connection") && e.contains("address of QP #0"), "{e}");
        // A broken address.
        let mut broken = client(4);
        broken.extend_from_slice(&[b'z'; KEY_LEN]);
        let e = against(Role::Server, "send_bw", broken, second);
        assert!(e.contains("QP address"), "{e}");
        // A silent server: the client gives up after its timeout.
        let (ours, theirs) = tcp_pair();
        let ch = Channel::new(OobStream::Tcp(ours), Role::Client, second, Box::new(|| 0));
        let mut fake = Fake::new(1, 1);
        let started = std::time::Instant::now();
        let e = run(&plan("send_bw 1.2.3.4"), Mtu::Mtu1024, ch, |_| Ok(&mut fake), &mut Vec::new())
            .expect_err("silence");
        assert!(e.contains("no version from the peer for 1 s"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(theirs);
        // A peer whose later copy of its address differs: out of step.
        let mut changed = client(6);
        let mut other = v.messages[8].1.clone();
        other[20] = b'f';
        changed.extend_from_slice(&other);
        let e = against(Role::Server, "send_bw -n 100 -s 4096", changed, second);
        assert!(e.contains("out of step"), "{e}");
        // A WRITE client whose report does not match the test.
        let w = vector("write_bw");
        // Its 4 fixed messages, 4 addresses, and the 5 report fields.
        let report: Vec<u8> = w
            .messages
            .iter()
            .filter(|(r, _)| *r == Role::Client)
            .take(13)
            .flat_map(|(_, m)| m.clone())
            .collect();
        let e = against(Role::Server, "write_bw -n 500 -s 4096", report, second);
        assert!(e.contains("run both sides with the same"), "{e}");
    }
}
