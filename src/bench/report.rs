//! perftest's report: the table headers, rows and their arithmetic
//! (`print_report_bw`, `print_report_lat` in perftest_parameters.c), plus
//! one machine-readable `metric=` line per value.

/// perftest's `RESULT_LINE`.
pub(crate) const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";
/// perftest's `RESULT_FMT` (bandwidth header, MB/sec = 2^20 bytes/s).
pub(crate) const RESULT_FMT: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
/// perftest's `RESULT_FMT_LAT`.
pub(crate) const RESULT_FMT_LAT: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  \
     t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   \
     99.9% percentile[usec] ";

/// perftest's `MB/sec`.
const MEGABYTE: f64 = 1_048_576.0;
/// perftest's `LAT_MEASURE_TAIL`: the largest samples left out.
const LAT_MEASURE_TAIL: usize = 2;
/// Work for the peak search (posts x completions) before it samples posts.
const PEAK_BUDGET: u64 = 200_000_000;

/// What a bandwidth run recorded, in nanoseconds since its start.
#[derive(Debug, Default)]
pub(crate) struct BwSamples {
    /// Every WR's post time, in post order (empty without peak).
    pub posted: Vec<u64>,
    /// Per completion: WRs completed so far (all QPs), and when.
    pub completed: Vec<(u64, u64)>,
    /// The first post.
    pub first_post: u64,
    /// The last completion.
    pub last_completion: u64,
    /// WRs in all.
    pub total: u64,
}

/// A bandwidth row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BwRow {
    /// Message size.
    pub size: u32,
    /// WRs in all (iterations x QPs, as perftest reports).
    pub iters: u64,
    /// Peak, MB/sec.
    pub peak: f64,
    /// Average, MB/sec.
    pub average: f64,
    /// Messages per second, millions.
    pub msg_rate: f64,
    /// Average in GB/s (10^9 bytes).
    pub gbs: f64,
}

impl BwRow {
    /// perftest's arithmetic over the samples.
    pub fn compute(size: u32, s: &BwSamples) -> BwRow {
        let span_ns = s.last_completion.saturating_sub(s.first_post).max(1) as f64;
        let bytes = f64::from(size) * s.total as f64;
        let average = bytes * 1e9 / span_ns / MEGABYTE;
        let msg_rate = s.total as f64 * 1e3 / span_ns;
        let gbs = bytes / span_ns;
        let peak = peak_ns_per_msg(s)
            .map_or(0.0, |ns_per_msg| f64::from(size) * 1e9 / ns_per_msg / MEGABYTE);
        BwRow { size, iters: s.total, peak, average, msg_rate, gbs }
    }

    /// perftest's `REPORT_FMT` line.
    pub fn line(&self) -> String {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            self.size, self.iters, self.peak, self.average, self.msg_rate
        )
    }

    /// The `metric=` lines.
    pub fn metrics(&self, op: &str) -> String {
        format!(
            "metric={op}_bw_{size} value={:.6} unit=GB/s\nmetric={op}_msgrate_{size} value={:.6} \
             unit=Mpps",
            self.gbs,
            self.msg_rate,
            size = self.size
        )
    }
}

/// perftest's peak: the shortest time per message over any run of
/// messages from a post to a completion (`tcompleted[j] - tposted[i]) /
/// (j - i + 1)`). Posts are sampled when the search would be too long.
fn peak_ns_per_msg(s: &BwSamples) -> Option<f64> {
    let n = s.posted.len() as u64;
    let m = s.completed.len() as u64;
    if n == 0 || m == 0 {
        return None;
    }
    let step = (n * m).div_ceil(PEAK_BUDGET).max(1) as usize;
    let mut best: Option<f64> = None;
    for (i, &tp) in s.posted.iter().enumerate().step_by(step) {
        let i = i as u64;
        // Completions are in order of their cumulative count.
        let first = s.completed.partition_point(|&(count, _)| count <= i);
        for &(count, tc) in &s.completed[first..] {
            let t = tc.saturating_sub(tp) as f64 / (count - i) as f64;
            if t > 0.0 && best.is_none_or(|b| t < b) {
                best = Some(t);
            }
        }
    }
    best
}

/// A latency row, in microseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatRow {
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

    /// The `metric=` line (the typical latency).
    pub fn metric(&self, op: &str) -> String {
        format!("metric={op}_lat_{} value={:.3} unit=us", self.size, self.typical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn bandwidth_average_and_peak() {
        // 4 messages of 1 MiB over 4 ms, completions one per message.
        let s = BwSamples {
            posted: vec![0, 0, 0, 0],
            completed: vec![(1, 1_000_000), (2, 2_000_000), (3, 3_000_000), (4, 4_000_000)],
            first_post: 0,
            last_completion: 4_000_000,
            total: 4,
        };
        let row = BwRow::compute(1 << 20, &s);
        assert!((row.average - 1000.0).abs() < 1e-6);
        assert!((row.peak - 1000.0).abs() < 1e-6);
        assert!((row.msg_rate - 0.001).abs() < 1e-9);
        assert!(row.metrics("write").starts_with("metric=write_bw_1048576 value=1.048576"));
    }
}
