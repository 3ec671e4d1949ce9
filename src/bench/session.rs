//! The two ends of `uroce bench`: the client describes the test, connects
//! the QPs, measures and prints perftest's report (plus one `metric=` line
//! per value); the server follows the client's description.

use super::engine::{QpMemory, QpShare, Role, Side};
use super::oob::{self, Channel, Endpoint};
use super::{Op, Params, Test, SHOWN_QPS};
use crate::app::Opened;
use crate::oob::OobListener;
use crate::perftest::report::{
    self, BwReport, LatRow, Measured, Unit, RESULT_FMT, RESULT_FMT_LAT, RESULT_LINE,
};
use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use uroce_net::udp::UdpConfig;
use uroce_verbs::Gid;

/// Work for the peak search (posts x completions) before it samples posts.
const PEAK_BUDGET: u64 = 200_000_000;

/// The bandwidth row's `metric=` lines: the average in GB/s (10^9 bytes)
/// and the message rate.
fn bw_metrics(op: &str, m: &Measured, r: &BwReport) -> String {
    format!(
        "metric={op}_bw_{size} value={:.6} unit=GB/s\nmetric={op}_msgrate_{size} value={:.6} \
         unit=Mpps",
        m.gigabytes_per_second(),
        r.msg_rate,
        size = m.size
    )
}

/// The `metric=` lines of the slowest QP's share (runs of more than one
/// QP; see [`QpShare`]).
fn share_metrics(s: &QpShare) -> String {
    format!(
        "metric=slowest_qp_share value={:.6} unit=x\nmetric=slowest_qp_finish value={:.6} unit=x",
        s.share, s.finish
    )
}

/// The latency row's `metric=` line (the typical latency).
fn lat_metric(op: &str, row: &LatRow) -> String {
    format!("metric={op}_lat_{} value={:.3} unit=us", row.size, row.typical)
}

/// Where the server listens.
pub(super) enum Listen<'a> {
    /// On a listener already bound (`--loopback`).
    Bound(&'a OobListener),
    /// On this TCP port at the device's address (as the other tools: a
    /// server on another address may use the same port).
    Port(u16),
}

/// The client's own settings.
pub(super) struct ClientOpts {
    /// Compute the peak bandwidth.
    pub(super) peak: bool,
    /// See `--max-inflight`.
    pub(super) max_inflight: u32,
    /// No `-m`: the path MTU is the port's active MTU (as perftest's), which
    /// the link's MTU sets on a link.
    pub(super) port_mtu: bool,
}

/// The client: describes the test, connects the QPs, measures, reports.
#[allow(clippy::too_many_arguments)]
pub(super) fn client(
    p: &Params,
    opts: &ClientOpts,
    config: UdpConfig,
    host: &str,
    port: u16,
    timeout: Duration,
    opened: &Opened,
    out: &mut dyn Write,
) -> Result<(), String> {
    let node = opened.node(config, 1)?;
    let mut p = p.clone();
    if opts.port_mtu {
        let attr = node.ctx.query_port().map_err(|e| format!("query_port: {e}"))?;
        p.mtu = p.mtu.min(attr.active_mtu.bytes());
    }
    let stream = crate::oob::connect(&node.dev, host, port, timeout)?;
    let mut ch = Channel::new(stream, timeout);
    let result = client_session(&p, opts, node, &mut ch, timeout, out);
    if let Err(e) = &result {
        let _ = ch.send(&format!("ERR client: {e}"));
    }
    result
}

fn client_session(
    p: &Params,
    opts: &ClientOpts,
    node: crate::app::Node,
    ch: &mut Channel,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), String> {
    ch.send(&p.hello())?;
    let peer = Endpoint::receive(ch, "OK", p.qps as usize)?;
    let mut side = Side::create(node, p, Role::Client, timeout)?;
    ch.send(&side.endpoint().encode("PEER"))?;
    side.connect(p, &peer)?;
    ch.expect("READY")?;
    let w = |out: &mut dyn Write, text: &str| {
        writeln!(out, "{text}").map_err(|e| format!("writing the report: {e}"))
    };
    w(out, &banner(p, Role::Client, side.node.addr(), &side.memory))?;
    w(out, &addresses(&side.endpoint(), &peer, p.op))?;
    w(out, RESULT_LINE)?;
    w(out, if p.test == Test::Bw { RESULT_FMT } else { RESULT_FMT_LAT })?;
    for &size in &p.sizes {
        ch.send(&format!("SIZE {size}"))?;
        ch.expect("GO")?;
        let text = match p.test {
            Test::Bw => {
                let record = opts.peak && u64::from(p.qps) * u64::from(p.iters) <= 1 << 22;
                let run = side.client_bw(p, size, &peer, record, opts.max_inflight)?;
                let m = &run.measured;
                let r = m.report_with_budget(Unit::MegaBytes, PEAK_BUDGET);
                let mut text = format!("{}\n{}", report::row(&r), bw_metrics(p.op.name(), m, &r));
                if let Some(share) = &run.share {
                    text += "\n";
                    text += &share_metrics(share);
                }
                text
            }
            Test::Lat => {
                let posts = side.client_lat(p, size, &peer)?;
                let row = LatRow::compute(size, &posts, p.rtt_factor())
                    .ok_or("too few iterations for a latency report")?;
                format!("{}\n{}", row.line(), lat_metric(p.op.name(), &row))
            }
        };
        ch.send("DONE")?;
        ch.expect("OK")?;
        w(out, &text)?;
        let _ = out.flush();
    }
    ch.send("BYE")?;
    w(out, RESULT_LINE)?;
    if p.qps > 1 {
        if let Some(rss) = side.memory.rss_per_qp {
            w(out, &format!("metric=hca_bytes_per_qp value={rss} unit=B"))?;
        }
    }
    Ok(())
}

/// The server's settings (the rest comes from the client).
pub(super) struct Server {
    pub(super) op: Op,
    pub(super) test: Test,
    pub(super) timeout: Duration,
    /// Print nothing (the --loopback server).
    pub(super) quiet: bool,
}

impl Server {
    pub(super) fn serve(
        &self,
        config: UdpConfig,
        listen: Listen<'_>,
        deadline: Option<Instant>,
        abort: &AtomicBool,
        opened: &Opened,
        out: &mut dyn Write,
    ) -> Result<(), String> {
        let node = opened.node(config, 1)?;
        let bound;
        let listener = match listen {
            Listen::Bound(listener) => listener,
            Listen::Port(port) => {
                bound = OobListener::bind(&node.dev, port)?;
                &bound
            }
        };
        if !self.quiet {
            let _ = writeln!(
                out,
                "\n************************************\n* Waiting for client to connect... \
                 *\n************************************"
            );
            let _ = out.flush();
        }
        let stream = listener.accept(deadline, abort)?;
        let mut ch = Channel::new(stream, self.timeout);
        let result = self.session(node, &mut ch, out);
        if let Err(e) = &result {
            let _ = ch.send(&format!("ERR server: {e}"));
        }
        result
    }

    fn session(
        &self,
        node: crate::app::Node,
        ch: &mut Channel,
        out: &mut dyn Write,
    ) -> Result<(), String> {
        let p = Params::parse_hello(&ch.recv()?)?;
        if (p.op, p.test) != (self.op, self.test) {
            return Err(format!(
                "the client runs `{} {}`, this server `{} {}`",
                p.op.name(),
                p.test.name(),
                self.op.name(),
                self.test.name()
            ));
        }
        let mut side = Side::create(node, &p, Role::Server, self.timeout)?;
        ch.send(&side.endpoint().encode("OK"))?;
        let peer = Endpoint::receive(ch, "PEER", p.qps as usize)?;
        side.connect(&p, &peer)?;
        ch.send("READY")?;
        if !self.quiet {
            let _ = writeln!(out, "{}", banner(&p, Role::Server, side.node.addr(), &side.memory));
            let _ = writeln!(out, "{}", addresses(&side.endpoint(), &peer, p.op));
            let _ = writeln!(out, "{RESULT_LINE}");
            let _ = out.flush();
        }
        loop {
            let line = self.next_line(ch, &side)?;
            if line == "BYE" {
                break;
            }
            let size = line
                .strip_prefix("SIZE ")
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|s| p.sizes.contains(s))
                .ok_or_else(|| format!("unexpected message from the client: `{line}`"))?;
            match p.test {
                Test::Bw => {
                    ch.send("GO")?;
                    if p.op == Op::Send {
                        side.server_send_bw(&p, size)?;
                    }
                }
                Test::Lat => {
                    let posted = side.server_lat_prepare(&p, size)?;
                    ch.send("GO")?;
                    side.server_lat(&p, size, &peer, posted)?;
                }
            }
            oob::check_word(&self.next_line(ch, &side)?, "DONE")?;
            ch.send("OK")?;
        }
        if !self.quiet {
            let _ = writeln!(out, "{RESULT_LINE}");
        }
        Ok(())
    }

    /// The client's next line; while it is busy the device must see
    /// packets, or the client is gone after the timeout.
    fn next_line(&self, ch: &mut Channel, side: &Side) -> Result<String, String> {
        let mut seen = side.rx_packets();
        let mut last_progress = Instant::now();
        loop {
            if let Some(line) = ch.try_recv(Duration::from_millis(100))? {
                if let Some(why) = line.strip_prefix("ERR ") {
                    return Err(format!("the peer failed: {why}"));
                }
                return Ok(line);
            }
            let now = side.rx_packets();
            if now != seen {
                seen = now;
                last_progress = Instant::now();
            } else if last_progress.elapsed() >= self.timeout {
                return Err(format!(
                    "the client sent nothing for {} s (gone?)",
                    self.timeout.as_secs_f64()
                ));
            }
        }
    }
}

/// perftest's test description (`ctx_print_test_info`), plus what the QPs
/// cost in host memory.
fn banner(p: &Params, role: Role, dev: IpAddr, mem: &QpMemory) -> String {
    let kind = match p.test {
        Test::Bw => "BW",
        Test::Lat => "Latency",
    };
    let mut s = format!("{RESULT_LINE}\n                    {} {kind} Test\n", p.op.title());
    s += &format!(" Dual-port       : OFF\t\tDevice         : uroce@{dev}\n");
    s += &format!(" Number of qps   : {}\t\tTransport type : IB\n", p.qps);
    s += " Connection type : RC\t\tUsing SRQ      : OFF\n";
    if role == Role::Client {
        s += &format!(" TX depth        : {}\n", p.tx_depth);
    }
    if p.op == Op::Send && (role == Role::Server || p.test == Test::Lat) {
        s += &format!(" RX depth        : {}\n", p.rx_depth);
    }
    if p.test == Test::Bw {
        s += &format!(" CQ Moderation   : {}\n", p.cq_mod);
    }
    s += &format!(" Mtu             : {}[B]\n", p.mtu);
    s += " Link type       : Ethernet\n GID index       : 1\n";
    match p.op {
        Op::Send | Op::Write => s += &format!(" Max inline data : {}[B]\n", p.inline),
        Op::Read | Op::Atomic => {
            let outs = if p.test == Test::Bw { p.tx_depth.clamp(1, 128) } else { 16 };
            s += &format!(" Outstand reads  : {outs}\n");
        }
    }
    s += " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n";
    let rings = mem.sq_bytes + mem.rq_bytes;
    s += &format!(
        " HCA memory/QP   : {rings}[B] rings (SQ {} + RQ {}), QP context {}[B] + heap",
        mem.sq_bytes, mem.rq_bytes, mem.context_bytes
    );
    match mem.rss_per_qp {
        Some(rss) => s += &format!("; process RSS +{rss}[B]/QP over {} QPs\n", p.qps),
        None => s += "\n",
    }
    s += RESULT_LINE;
    s
}

/// perftest's address lines (`ctx_print_pingpong_data`) for the first QPs.
fn addresses(local: &Endpoint, remote: &Endpoint, op: Op) -> String {
    let mut s = String::new();
    for (side, e) in [("local", local), ("remote", remote)] {
        for &(qpn, psn) in e.qps.iter().take(SHOWN_QPS) {
            s += &format!(" {side} address: LID 0000 QPN {qpn:#06x} PSN {psn:#06x}");
            if op != Op::Send {
                s += &format!(" RKey {:#08x} VAddr {:#016x}", e.rkey, e.vaddr);
            }
            let gid: Vec<String> = Gid::from_ip(e.ip).0.iter().map(|b| format!("{b:02}")).collect();
            s += &format!("\n GID: {}\n", gid.join(":"));
        }
        if e.qps.len() > SHOWN_QPS {
            s += &format!(" ... and {} more {side} QPs\n", e.qps.len() - SHOWN_QPS);
        }
    }
    s.pop();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_metrics() {
        // 4 messages of 1 MiB over 4 ms, completions one per message.
        let m = Measured {
            size: 1 << 20,
            iters: 4,
            elapsed_ns: 4_000_000,
            posted_ns: vec![0; 4],
            completed_ns: vec![(1, 1_000_000), (2, 2_000_000), (3, 3_000_000), (4, 4_000_000)],
        };
        let r = m.report_with_budget(Unit::MegaBytes, PEAK_BUDGET);
        assert!((r.average - 1000.0).abs() < 1e-6);
        assert!((r.peak - 1000.0).abs() < 1e-6);
        assert!((r.msg_rate - 0.001).abs() < 1e-9);
        let text = bw_metrics("write", &m, &r);
        assert!(text.starts_with("metric=write_bw_1048576 value=1.048576"), "{text}");
        assert!(text.ends_with("metric=write_msgrate_1048576 value=0.001000 unit=Mpps"), "{text}");
    }
}
