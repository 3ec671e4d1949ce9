#!/usr/bin/env bash
# uroce's real-network benchmarks beside this machine's limits, in one run.
#
#   tests/perf/vs-baseline.sh            # needs ../shared/baseline (the limits program)
#
# Builds uroce and ../shared/baseline (in target/baseline), measures the
# baseline figures the issue compares against, then runs `uroce bench` as two
# processes (server 127.0.0.1, client 127.0.0.2) and prints each figure with
# its ratio (uroce figures: the median of three runs). Loopback only; every
# run is bounded by `timeout`. Takes ~2 min.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
shared=${SHARED:-$root/../shared}
cargo build --release -q
uroce=$root/target/release/uroce
CARGO_TARGET_DIR=$root/target/baseline cargo build --release -q --manifest-path "$shared/baseline/Cargo.toml"
baseline=$root/target/baseline/release/baseline

metric() { sed -n "s/^metric=$1 value=\([^ ]*\).*/\1/p" | head -1; }
port=19100
# Runs `uroce bench ARGS` as a server and a client process; prints the client's output.
pair() {
  port=$((port + 1))
  UROCE_ADDR=127.0.0.1 timeout 120 "$uroce" bench "$@" -p "$port" > /tmp/uroce-bench-server.$$ 2>&1 &
  local server=$!
  sleep 0.3
  UROCE_ADDR=127.0.0.2 timeout 120 "$uroce" bench "$@" -p "$port" 127.0.0.1
  wait "$server" || true
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# The median of three runs of `pair ARGS` for metric $1 (the machine is shared and noisy).
median3() {
  local name=$1; shift
  for _ in 1 2 3; do pair "$@" | metric "$name"; done | sort -g | sed -n 2p
}

echo "# baseline (../shared/baseline), same run"
blast=$("$baseline" udp-blast --sizes 64,4124 --modes plain,mmsg32,gso_gro --open-loop-only)
pingpong=$("$baseline" udp-pingpong)
plain_4124=$(metric udp_blast_plain_4124B_rx_GBps <<< "$blast")
gro_4124=$(metric udp_blast_gso_gro_4124B_rx_GBps <<< "$blast")
mmsg_64=$(metric udp_blast_mmsg32_64B_rx_pps <<< "$blast")
busy_rtt=$(metric udp_pingpong_busy_median_us <<< "$pingpong")
echo "udp-blast plain 4124 B: $plain_4124 GB/s; gso_gro 4124 B: $gro_4124 GB/s"
echo "udp-blast mmsg32 64 B: $mmsg_64 datagrams/s; busy UDP ping-pong RTT: $busy_rtt us"

echo "# RC WRITE 64 KiB, two processes"
write=$(median3 write_bw_65536 write bw -s 65536 -n 20000)
write_gso=$(median3 write_bw_65536 write bw -s 65536 -n 40000 --offload)
echo "metric=ratio_write_bw_64KiB_to_plain value=$(ratio "$write" "$plain_4124") unit=x ($write GB/s)"
echo "metric=ratio_write_bw_64KiB_offload_to_plain value=$(ratio "$write_gso" "$plain_4124") unit=x ($write_gso GB/s)"

echo "# RC SEND 64 B ping-pong, two processes"
lat=$(median3 send_lat_64 send lat -s 64 -n 20000)
rtt=$(awk -v l="$lat" 'BEGIN { printf "%.3f", 2 * l }')
echo "metric=ratio_send_rtt_64B_to_busy_udp value=$(ratio "$rtt" "$busy_rtt") unit=x (RTT $rtt us)"

echo "# 8 B RDMA WRITE message rate, batched posts, two processes"
rate=$(median3 write_msgrate_8 write bw -s 8 -n 1000000)
pps=$(awk -v r="$rate" 'BEGIN { printf "%.0f", r * 1e6 }')
echo "metric=ratio_write_msgrate_8B_to_mmsg32 value=$(ratio "$pps" "$mmsg_64") unit=x ($pps msg/s)"

echo "# scale: connected RC QPs, 4 KiB WRITEs"
for run in 1:20000 1000:20 10000:5; do
  qps=${run%%:*}
  out=$(pair write bw -s 4096 -n "${run##*:}" --qps "$qps")
  echo "qps=$qps bw=$(metric write_bw_4096 <<< "$out") GB/s hca_bytes_per_qp=$(metric hca_bytes_per_qp <<< "$out")"
  grep -i "memory\|ring" <<< "$out" | head -3 || true
done
rm -f /tmp/uroce-bench-server.$$
