//! What perftest prints: the test description (`ctx_print_test_info`),
//! the QP addresses (`ctx_print_pingpong_data`), the bandwidth table
//! (`print_report_bw`, `print_full_bw_report`) and the latency table
//! (`print_report_lat`), and the arithmetic behind their numbers. The one
//! report of `uroce perftest` and `uroce bench` (which adds its `metric=`
//! lines and its own banner).

pub(crate) use super::wire::BwReport;
use super::wire::Dest;
use super::{Connection, Plan, Verb};

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's `RESULT_FMT` (MB = 2^20 bytes).
pub const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// perftest's `RESULT_FMT_G` (`--report_gbits`, Gb = 10^9 bits).
pub const RESULT_FMT_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
/// perftest's `RESULT_FMT_LAT`.
pub const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  \
     t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   \
     99.9% percentile[usec] ";
/// perftest's `LAT_MEASURE_TAIL`: the largest samples left out.
const LAT_MEASURE_TAIL: usize = 2;

/// Bandwidth unit of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// MB/sec, 2^20 bytes per second (perftest's default).
    MegaBytes,
    /// Gb/sec, 10^9 bits per second (`--report_gbits`).
    Gigabits,
}

impl Unit {
    /// Bytes per second in one unit (perftest's `format_factor`).
    fn bytes_per_second(self) -> f64 {
        match self {
            Unit::MegaBytes => 1_048_576.0,
            Unit::Gigabits => 125_000_000.0,
        }
    }

    /// The table header.
    pub fn header(self) -> &'static str {
        match self {
            Unit::MegaBytes => RESULT_FMT,
            Unit::Gigabits => RESULT_FMT_G,
        }
    }
}

/// Work for the peak search (posts x completion points) before it samples
/// the posts (`uroce bench` allows more: [`Measured::report_with_budget`]).
pub const PEAK_BUDGET: u64 = 100_000_000;

/// One size's measurement, in nanoseconds.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Message size.
    pub size: u32,
    /// Messages over all QPs.
    pub iters: u64,
    /// From the first post (a server: the first arrival) to the last
    /// completion.
    pub elapsed_ns: u64,
    /// Every WR's post time in post order (empty: no peak).
    pub posted_ns: Vec<u64>,
    /// Per completion: WRs completed so far over all QPs, and when.
    pub completed_ns: Vec<(u64, u64)>,
}

impl Measured {
    /// perftest's figures: the average over the whole run, the message
    /// rate, and the peak (the best time per message over any run of
    /// messages from a post to a completion; 0 when not measured).
    pub fn report(&self, unit: Unit) -> BwReport {
        self.report_with_budget(unit, PEAK_BUDGET)
    }

    /// [`Measured::report`], the peak search sampling the posts past
    /// `peak_budget` posts x completion points.
    pub fn report_with_budget(&self, unit: Unit, peak_budget: u64) -> BwReport {
        let span = self.elapsed_ns.max(1) as f64;
        let factor = unit.bytes_per_second();
        let size = f64::from(self.size);
        let peak = self.peak_ns_per_msg(peak_budget).map_or(0.0, |ns| size * 1e9 / ns / factor);
        BwReport {
            size: u64::from(self.size),
            iters: self.iters,
            peak,
            average: size * self.iters as f64 * 1e9 / span / factor,
            msg_rate: self.iters as f64 * 1e3 / span,
        }
    }

    /// The average in GB/s of 10^9 bytes (bytes per nanosecond).
    pub fn gigabytes_per_second(&self) -> f64 {
        let bytes = f64::from(self.size) * self.iters as f64;
        bytes / self.elapsed_ns.max(1) as f64
    }

    /// perftest's peak: the shortest time per message over any run of
    /// messages from a post to a completion (`(tcompleted[j] - tposted[i])
    /// / (j - i + 1)`). Posts are sampled when the search would be longer
    /// than `budget`.
    fn peak_ns_per_msg(&self, budget: u64) -> Option<f64> {
        let posts = self.posted_ns.len() as u64;
        let points = self.completed_ns.len() as u64;
        if posts == 0 || points == 0 {
            return None;
        }
        let step = (posts * points).div_ceil(budget).max(1) as usize;
        let mut best: Option<f64> = None;
        for (i, &posted) in self.posted_ns.iter().enumerate().step_by(step) {
            let i = i as u64;
            // Completion points come in order of their running count.
            let first = self.completed_ns.partition_point(|&(count, _)| count <= i);
            for &(count, done) in &self.completed_ns[first..] {
                let t = done.saturating_sub(posted) as f64 / (count - i) as f64;
                if t > 0.0 && best.is_none_or(|b| t < b) {
                    best = Some(t);
                }
            }
        }
        best
    }
}

/// perftest's `REPORT_FMT` row.
pub fn row(r: &BwReport) -> String {
    format!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.peak, r.average, r.msg_rate
    )
}

/// A latency row, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct LatRow {
    /// Message size.
    pub size: u32,
    /// Iterations.
    pub iters: u64,
    /// Smallest.
    pub min: f64,
    /// Largest (after the tail perftest drops).
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatRow {
    /// perftest's arithmetic over the post times of `iters` iterations
    /// (nanoseconds): the gaps between consecutive posts, divided by
    /// `rtt_factor` (2 for SEND and WRITE ping-pong, 1 for READ and
    /// atomics). `None` with fewer than 5 posts.
    pub fn compute(size: u32, posted: &[u64], rtt_factor: f64) -> Option<LatRow> {
        if posted.len() < 5 {
            return None;
        }
        let mut delta: Vec<f64> =
            posted.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 / 1e3).collect();
        delta.sort_by(f64::total_cmp);
        let cnt = delta.len() - LAT_MEASURE_TAIL;
        let q = |v: f64| v / rtt_factor;
        let median = if (cnt - 1) % 2 == 1 {
            (delta[cnt / 2] + delta[cnt / 2 - 1]) / 2.0
        } else {
            delta[cnt / 2]
        };
        let avg = delta[..cnt].iter().map(|&d| q(d)).sum::<f64>() / cnt as f64;
        let var = delta[..cnt].iter().map(|&d| (avg - q(d)).powi(2)).sum::<f64>() / cnt as f64;
        let i99 = ((cnt as f64) * 0.99).ceil() as usize;
        let i999 = ((cnt as f64) * 0.999).ceil() as usize;
        Some(LatRow {
            size,
            iters: posted.len() as u64,
            min: q(delta[0]),
            max: q(delta[cnt]),
            typical: q(median),
            avg,
            stdev: var.sqrt(),
            p99: q(delta[i99.min(cnt)]),
            p999: q(delta[i999.min(cnt)]),
        })
    }

    /// perftest's `REPORT_FMT_LAT` line.
    pub fn line(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t\
             {:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.size,
            self.iters,
            self.min,
            self.max,
            self.typical,
            self.avg,
            self.stdev,
            self.p99,
            self.p999
        )
    }
}

/// C's `%#0Nx`: `0x` and zero-padded hex to `width` characters, but a
/// zero prints as zeros only.
fn alt_hex(value: u64, width: usize) -> String {
    if value == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{value:#0width$x}")
    }
}

/// The test description, printed once the MTU is agreed.
pub fn banner(plan: &Plan, mtu_bytes: u32, out_reads: u16, device: &str) -> String {
    let mut s = format!("{RESULT_LINE}\n                    {} BW Test\n", plan.title());
    s += &format!(" Dual-port       : OFF\t\tDevice         : {device}\n");
    s += &format!(" Number of qps   : {}\t\tTransport type : IB\n", plan.qps);
    s += &format!(" Connection type : {}\t\tUsing SRQ      : OFF\n", plan.connection.name());
    s += " ibv_wr* API     : OFF\n";
    if plan.is_client() {
        s += &format!(" TX depth        : {}\n", plan.tx_depth);
    } else if plan.verb == Verb::Send {
        s += &format!(" RX depth        : {}\n", plan.rx_depth);
    }
    s += &format!(" CQ Moderation   : {}\n", plan.cq_mod);
    s += &format!(" Mtu             : {mtu_bytes}[B]\n");
    s += " Link type       : Ethernet\n";
    s += &format!(" GID index       : {}\n", plan.gid_index);
    match plan.verb {
        Verb::Send | Verb::Write => s += &format!(" Max inline data : {}[B]\n", plan.inline_size),
        Verb::Read | Verb::Atomic => s += &format!(" Outstand reads  : {out_reads}\n"),
    }
    s += " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n";
    s += RESULT_LINE;
    s
}

/// One QP's address lines (`ctx_print_pingpong_data`).
pub fn address(side: &str, d: &Dest, verb: Verb) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        alt_hex(u64::from(d.lid), 4),
        alt_hex(u64::from(d.qpn), 6),
        alt_hex(u64::from(d.psn), 6)
    );
    if verb == Verb::Read {
        s += &format!(" OUT {}", alt_hex(u64::from(d.out_reads), 4));
    }
    if matches!(verb, Verb::Read | Verb::Write) {
        s += &format!(" RKey {} VAddr {}", alt_hex(u64::from(d.rkey), 8), alt_hex(d.vaddr, 16));
    }
    let gid: Vec<String> = d.gid.0.iter().map(|b| format!("{b:02}")).collect();
    s += &format!("\n GID: {}", gid.join(":"));
    s
}

impl Connection {
    /// perftest's name.
    pub fn name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Uc => "UC",
            Connection::Ud => "UD",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perftest::wire::tests::vector;

    #[test]
    fn rows_and_addresses_are_printed_as_perftest_prints_them() {
        let v = vector("write_bw");
        let r = BwReport { size: 4096, iters: 100, peak: 8.82, average: 7.66, msg_rate: 0.001961 };
        assert_eq!(row(&r), v.server_line);
        assert_eq!(row(&r), v.client_line);
        // The VM printed: ` local address: LID 0000 QPN 0x0011 PSN 0x53641f RKey 0x0002e3
        // VAddr 0x00557701d29000` and its GID in decimal.
        let d = Dest::from_wire(&v.messages[9].1).unwrap();
        assert_eq!(
            address("local", &d, Verb::Write),
            " local address: LID 0000 QPN 0x0011 PSN 0x53641f RKey 0x0002e3 VAddr \
             0x00557701d29000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:169:254:00:01"
        );
        let read = Dest::from_wire(&vector("read_bw").messages[8].1).unwrap();
        assert_eq!(
            address("local", &read, Verb::Read).lines().next().unwrap(),
            " local address: LID 0000 QPN 0x0011 PSN 0xce52ac OUT 0x80 RKey 0x0002f5 VAddr \
             0x0055930217a000"
        );
        assert_eq!(
            address("remote", &d, Verb::Atomic).lines().next().unwrap(),
            " remote address: LID 0000 QPN 0x0011 PSN 0x53641f"
        );
        assert_eq!(alt_hex(0, 6), "000000");
    }

    #[test]
    fn bandwidth_average_rate_and_peak() {
        // 4 messages of 1 MiB: posted at 0, completed at 1, 2, 3, 4 ms.
        let m = Measured {
            size: 1 << 20,
            iters: 4,
            elapsed_ns: 4_000_000,
            posted_ns: vec![0; 4],
            completed_ns: vec![(1, 1_000_000), (2, 2_000_000), (3, 3_000_000), (4, 4_000_000)],
        };
        let r = m.report(Unit::MegaBytes);
        assert!((r.average - 1000.0).abs() < 1e-9);
        assert!((r.peak - 1000.0).abs() < 1e-9);
        assert!((r.msg_rate - 0.001).abs() < 1e-12);
        let g = m.report(Unit::Gigabits);
        assert!((g.average - 1000.0 * 1_048_576.0 / 125_000_000.0).abs() < 1e-9);
        assert!((m.gigabytes_per_second() - 1.048576).abs() < 1e-12);
        let no_peak = Measured { posted_ns: vec![], ..m };
        assert_eq!(no_peak.report(Unit::MegaBytes).peak, 0.0);
    }

    #[test]
    fn latency_statistics_follow_perftest() {
        // Gaps of 2, 4, ..., 20 us (10 gaps), reported as one-way (halved).
        let mut t = 0;
        let mut posted = vec![0];
        for k in 1..=10u64 {
            t += 2_000 * k;
            posted.push(t);
        }
        let row = LatRow::compute(64, &posted, 2.0).unwrap();
        assert_eq!(row.iters, 11);
        assert!((row.min - 1.0).abs() < 1e-9);
        // Two largest gaps dropped: 8 remain (1..8 us one-way), max = 9.
        assert!((row.max - 9.0).abs() < 1e-9);
        assert!((row.typical - 4.5).abs() < 1e-9);
        assert!((row.avg - 4.5).abs() < 1e-9);
        assert!(LatRow::compute(64, &posted[..4], 2.0).is_none());
    }
}
