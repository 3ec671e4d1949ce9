#!/usr/bin/env bash
# uroce beside the software a user would pick instead (UCX over TCP) and this
# machine's limits (../shared/baseline, and a raw UDP ping-pong in uroce's own
# socket style), all measured in one run: issue 14's targets P1-P5.
#
#   tests/perf/vs-peers.sh            # ~3 min on an idle machine
#   tests/perf/vs-peers.sh --quick    # tiny counts: only checks that every step still works
#
# Builds uroce (release: the `uroce` command, its libibverbs.so, `uroce-perf`)
# and ../shared/baseline (in target/baseline); installs ucx-utils, perftest and
# ibverbs-utils with apt when missing (needs root; without root it says so and
# exits with status 3). Then, in three rounds that each run every measurement
# once (so that a ratio's two figures come from the same minutes), each
# measurement the median of its three runs (--quick: one round):
#   baseline   udp-blast plain/mmsg32/gso_gro 64 B and 4124 B, open loop and
#              flow-controlled; udp-pingpong (connected sockets)
#   UCX 1.13   ucx_perftest server and client processes, UCX_TLS=tcp
#              UCX_NET_DEVICES=lo: ucp_am_bw 64 KiB, tag_lat 64 B
#   uroce      `uroce bench` as two processes (WRITE 64 KiB with the default
#              segmentation offload and with --no-offload, SEND 64 B latency, 8 B WRITE message rate, 1 and
#              10,000 QPs (20 WRITEs per QP: with 5 the run is mostly each QP's start,
#              see docs/performance.md), with the slowest QP's share); Debian's ib_send_lat and ibv_rc_pingpong on uroce's
#              libibverbs.so.1 (`uroce run`), two processes each
#   raw UDP    `uroce-perf udp-pingpong`: unconnected sockets, one per source
#              port, busy-polled as uroce's runtime polls (recvmsg after an
#              empty poll, recvmmsg after one that found something: uroce's
#              socket style), two processes
#   engine     `uroce-perf engine` (the cases of `cargo bench --bench engine`)
# and prints `metric=ratio_<...> value=<x>` lines for P1-P5, then a table.
#
# Loopback only: each pair of processes gets addresses of its own (uroce
# devices in 127.140.0.0/16, the raw UDP ping-pong in 127.141.0.0/16, no other
# test uses them) and a TCP port of its own; every process runs under
# `timeout`, and background servers are stopped on any exit.
#
# Environment (for tests/tests/perf_script.rs, which runs --quick on the
# binaries `cargo test` built): UROCE (the uroce command), UROCE_PERF (the
# uroce-perf program), UROCE_LIBIBVERBS (the library `uroce run` loads),
# VS_PEERS_NO_BUILD=1 (build only the baseline), SHARED (default ../shared),
# BASELINE_FLAGS (default "--tries 1": measure at once; the header counts the
# baseline's measurements taken while other processes used the machine; on an
# idle machine "--tries 4" retries those), VS_PEERS_LOG=DIR (keep every run's
# raw output there), VS_PEERS_QUICK=1 (same as --quick).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

quick=${VS_PEERS_QUICK:-0}
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vs-peers: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[ "$quick" = 1 ] && runs=1 || runs=3
# The sizes of every measurement: full, or --quick.
if [ "$quick" = 1 ]; then
  limit=40
  blast_flags=(--secs 0.05 --tries 1); pingpong_iters=200
  ucx_bw_iters=200; ucx_lat_iters=500; ucx_warmup=20
  write_iters=50; lat_iters=200; rate_iters=2000; one_qp_iters=100
  many_qps=100; many_iters=5; tool_iters=200; engine_scale=1
else
  limit=180
  read -r -a blast_flags <<< "${BASELINE_FLAGS:---tries 1}"
  pingpong_iters=20000
  ucx_bw_iters=20000; ucx_lat_iters=20000; ucx_warmup=1000
  write_iters=20000; lat_iters=20000; rate_iters=1000000; one_qp_iters=20000
  many_qps=10000; many_iters=20; tool_iters=20000; engine_scale=20
fi

say() { echo "vs-peers: $*" >&2; }

# --- what it needs ----------------------------------------------------------
need=()
command -v ucx_perftest > /dev/null 2>&1 || need+=(ucx-utils)
command -v ib_send_lat > /dev/null 2>&1 || need+=(perftest)
command -v ibv_rc_pingpong > /dev/null 2>&1 || need+=(ibverbs-utils)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    say "missing ${need[*]}, and not root: cannot install them." \
      "Install them with: sudo apt-get update && sudo apt-get install -y ${need[*]}"
    exit 3
  fi
  say "installing ${need[*]} (apt-get)"
  if ! (export DEBIAN_FRONTEND=noninteractive
        timeout 600 apt-get update -qq &&
        timeout 600 apt-get install -y -qq --no-install-recommends "${need[@]}") > /dev/null; then
    say "could not install ${need[*]} with apt-get"
    exit 3
  fi
fi
# ../shared beside the checkout, or beside the repository a local clone was
# made from (a fresh clone elsewhere, as `git clone /work/main /tmp/x`).
shared=${SHARED:-$root/../shared}
if [ -z "${SHARED:-}" ] && [ ! -d "$shared" ]; then
  origin=$(git -C "$root" config --get remote.origin.url 2> /dev/null || true)
  case $origin in
    /*) [ -d "$origin/../shared" ] && shared=$origin/../shared ;;
  esac
fi
if [ ! -f "$shared/baseline/Cargo.toml" ]; then
  say "no $shared/baseline (the limits program beside the checkout; set SHARED)"
  exit 3
fi

# --- build ------------------------------------------------------------------
if [ "${VS_PEERS_NO_BUILD:-0}" != 1 ]; then
  cargo build --release -q -p uroce -p uroce-ibverbs
  cargo build --release -q -p uroce-tests --bin uroce-perf
fi
uroce=${UROCE:-$root/target/release/uroce}
perf=${UROCE_PERF:-$root/target/release/uroce-perf}
CARGO_TARGET_DIR=$root/target/baseline cargo build --release -q \
  --manifest-path "$shared/baseline/Cargo.toml"
baseline=$root/target/baseline/release/baseline

# --- helpers ----------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vs-peers.XXXXXX")
bg_pids=()
cleanup() {
  local pid
  for pid in "${bg_pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${bg_pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  if [ -n "${VS_PEERS_LOG:-}" ]; then mkdir -p "$VS_PEERS_LOG" && cp -r "$tmp"/. "$VS_PEERS_LOG"/; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bounded() { timeout -k 5 "$limit" "$@"; }
# The value of the first `metric=NAME value=...` line of stdin or of files $2...
metric() {
  local name=$1
  shift
  awk -v m="metric=$name value=" 'FNR == 1 { seen = 0 }
    !seen && index($0, m) == 1 { sub(/^[^ ]* value=/, ""); print $1; seen = 1 }' "$@"
}
# The median of the numbers on stdin (blank lines and what is not a number,
# such as the baseline's "nan" for a measurement without samples, skipped;
# none: blank).
median() {
  { grep -E '^-?[0-9.]+([eE][-+]?[0-9]+)?$' || true; } | sort -g | awk 'NF { v[n++] = $1 } END {
    if (n == 0) print ""; else if (n % 2) print v[int(n / 2)];
    else printf "%.6g\n", (v[n / 2 - 1] + v[n / 2]) / 2 }'
}
# med KEY NAME: the median of metric NAME over the runs of measurement KEY.
med() {
  local files=("$tmp/$1".*)
  [ -e "${files[0]}" ] || return 0
  metric "$2" "${files[@]}" | median
}
# Each run's value of metric NAME in measurement KEY, for the record.
each() {
  local files=("$tmp/$1".*)
  [ -e "${files[0]}" ] || return 0
  metric "$2" "${files[@]}" | while read -r v; do printf '%s ' "$(fig "$v")"; done
}
# A figure for people: three significant digits (whole numbers from 1000 on).
fig() { awk -v v="$1" 'BEGIN { if (v == "") print "n/a"; else if (v >= 1000) printf "%.0f\n", v;
  else printf "%.3g\n", v }'; }
# $1 / $2 (blank when either is missing), and $1 * $2. Three decimals: a
# ratio of 0.4996 against a target of 0.5 must not print as 0.50.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f", a / b }'; }
times() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "") printf "%.6g", a * b }'; }

# Each pair of processes: addresses 127.140.<slot>.1 (server) and .2 (client)
# and TCP port <base + slot>.
slot=0
port_base=$((21000 + ($$ % 50) * 200))
next_slot() {
  slot=$((slot + 1))
  srv=127.140.$slot.1 cli=127.140.$slot.2 port=$((port_base + slot))
}
listening() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" '$2 ~ p "$" && $4 == "0A" { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2> /dev/null
}
# serve CMD...: starts a server in the background and waits until it
# listens on $port (or ends).
serve() {
  bounded "$@" > "$tmp/server.$slot" 2>&1 &
  server=$!
  bg_pids+=("$server")
  local i
  for i in $(seq 200); do
    listening "$port" && return 0
    kill -0 "$server" 2> /dev/null || break
    sleep 0.05
  done
  say "server on port $port did not listen: $*"
  sed 's/^/  server: /' "$tmp/server.$slot" >&2
  return 1
}
# Waits a little for the server to end after its client, then stops it.
reap() {
  local i
  for i in $(seq 100); do kill -0 "$server" 2> /dev/null || break; sleep 0.05; done
  kill "$server" 2> /dev/null || true
  wait "$server" 2> /dev/null || true
}
# One run of measurement KEY: `run KEY FUNCTION ARGS...` keeps its output
# (metric lines) as $tmp/KEY.<n>; a failed run leaves a note, no figure.
declare -A runs_of
run() {
  local key=$1 n
  shift
  n=$((${runs_of[$key]:-0} + 1))
  runs_of[$key]=$n
  if ! "$@" > "$tmp/$key.$n" 2>&1; then
    say "$key run $n failed:"
    tail -5 "$tmp/$key.$n" | sed 's/^/  /' >&2
  fi
}

# uroce bench ARGS as a server and a client process.
uroce_bench() {
  next_slot
  serve env UROCE_ADDR="$srv" "$uroce" bench "$@" -p "$port" || return 1
  local rc=0
  UROCE_ADDR=$cli bounded "$uroce" bench "$@" -p "$port" "$srv" || rc=$?
  reap
  return $rc
}
# A Debian tool on uroce's library as a server and a client process.
uroce_tool() {
  next_slot
  serve "$uroce" run --addr "$srv" -- "$@" -p "$port" || return 1
  local rc=0
  bounded "$uroce" run --addr "$cli" -- "$@" -p "$port" "$srv" || rc=$?
  reap
  return $rc
}
# (No subshells around serve: the slot counter and the servers to stop
# live in this shell.)
perftest_lat() {
  local rc=0
  uroce_tool ib_send_lat -x 1 -s 64 -n "$tool_iters" > "$tmp/_tool.out" 2>&1 || rc=$?
  cat "$tmp/_tool.out"
  awk '$1 == 64 && NF >= 5 { print "metric=ib_send_lat_64 value=" $5 " unit=us" }' "$tmp/_tool.out"
  return $rc
}
rc_pingpong() {
  local rc=0
  uroce_tool ibv_rc_pingpong -g 1 -s 64 -n "$tool_iters" > "$tmp/_tool.out" 2>&1 || rc=$?
  cat "$tmp/_tool.out"
  sed -n 's/.* iters in .* = \([0-9.]*\) usec\/iter.*/metric=rc_pingpong_64 value=\1 unit=us/p' \
    "$tmp/_tool.out"
  return $rc
}
# ucx_perftest TEST SIZE ITERS as a server and a client process over TCP on
# loopback; prints the client's final line as metrics: the median latency
# (one way, µs) and the bandwidth over the whole run (GB/s; ucx_perftest's
# MB/s are 2^20 bytes).
ucx() {
  next_slot
  local env=(env UCX_TLS=tcp UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n)
  serve "${env[@]}" ucx_perftest -p "$port" || return 1
  local rc=0 out
  out=$(bounded "${env[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$1" -s "$2" -n "$3" \
    -w "$ucx_warmup" -f 2>&1) || rc=$?
  reap
  echo "$out"
  awk '/^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ { last = $0 } END {
    if (last == "") exit 1
    split(last, f, " ")
    printf "metric=ucx_p50_us value=%s unit=us\n", f[2]
    printf "metric=ucx_bw value=%.6f unit=GB/s\n", f[6] * 1048576 / 1e9 }' <<< "$out"
  return $rc
}
udp_pingpong() {
  next_slot
  bounded "$perf" udp-pingpong --addrs "127.141.$slot.1,127.141.$slot.2" --iters "$pingpong_iters"
}
# Bytes beyond the rings per QP and the retry-exceeded count of a many-QP
# run (ARGS: more flags); the count is printed after a failed run too.
many_qps() {
  local rc=0
  uroce_bench write bw -s 4096 -n "$many_iters" --qps "$many_qps" --counters "$@" \
    > "$tmp/_many.out" 2>&1 || rc=$?
  cat "$tmp/_many.out"
  awk '/HCA memory\/QP/ { sub(/.*: */, ""); sub(/\[B\].*/, ""); rings = $0 }
       /^metric=hca_bytes_per_qp / { sub(/.*value=/, ""); rss = $1 }
       /^counter .* retry_exceeded_err / { retry += $4 }
       END { if (rss != "" && rings != "")
               printf "metric=qp_bytes_beyond_rings value=%d unit=B\n", rss - rings
             printf "metric=retry_exceeded_err value=%d unit=errors\n", retry }' "$tmp/_many.out"
  return $rc
}
# The same with every WR posted at once (--max-inflight 0, as perftest
# does): P4 wants no retry-exceeded errors from the device's own bursts. Its
# figure is the count, so a run that ends in RetryExcErr is no failure here.
many_qps_open() {
  many_qps --max-inflight 0 || true
}
# The same two with one UDP source port per device instead of rxe's port
# per QP (UROCE_SOURCE_PORTS=shared): the kernel then batches many QPs'
# packets per send call (GSO) and receive (GRO).
many_qps_shared() {
  UROCE_SOURCE_PORTS=shared many_qps
}
many_qps_shared_open() {
  UROCE_SOURCE_PORTS=shared many_qps_open
}

# --- measure ----------------------------------------------------------------
# Rounds: each measurement once per round, so that a ratio's two figures
# (uroce and its reference) come from the same minutes of every round: the
# machine's speed drifts by tens of percent over minutes (docs/performance.md,
# "The machine's two speeds"), and measuring all of one, then all of the other,
# put that drift into the ratios.
start=$(date +%s)
one_round() {
  say "round $1 of $runs: baseline (../shared/baseline)"
  # The baseline waits for an idle machine (its guard): a longer bound.
  run blast timeout -k 5 900 "$baseline" udp-blast --sizes 64,4124 --modes plain,mmsg32,gso_gro "${blast_flags[@]}"
  run udp timeout -k 5 900 "$baseline" udp-pingpong --iters "$pingpong_iters" "${blast_flags[@]}"
  say "round $1: raw UDP ping-pong in uroce's socket style (uroce-perf udp-pingpong)"
  run rawudp udp_pingpong
  say "round $1: UCX over TCP on loopback (ucx_perftest), and uroce bench, two processes"
  run ucx_bw ucx ucp_am_bw 65536 "$ucx_bw_iters"
  run write uroce_bench write bw -s 65536 -n "$write_iters"
  run plain uroce_bench write bw -s 65536 -n "$write_iters" --no-offload
  run ucx_lat ucx tag_lat 64 "$ucx_lat_iters"
  run lat uroce_bench send lat -s 64 -n "$lat_iters"
  run rate uroce_bench write bw -s 8 -n "$rate_iters"
  run one_qp uroce_bench write bw -s 4096 -n "$one_qp_iters" --qps 1
  run many many_qps
  run many_shared many_qps_shared
  run many_open many_qps_open
  run many_shared_open many_qps_shared_open
  say "round $1: Debian's perftest and ibv_rc_pingpong on uroce's libibverbs.so.1"
  run ib_send_lat perftest_lat
  run rc_pingpong rc_pingpong
  say "round $1: engine on the simulated fabric (uroce-perf engine --scale $engine_scale)"
  run engine bounded "$perf" engine --scale "$engine_scale"
}
for round in $(seq "$runs"); do one_round "$round"; done
# The baseline's busy-polling ping-pong spins two threads on this machine's
# cores: under other load a run can end with no sample ("nan"). One more run
# then, so that a reference goes missing only when it cannot be measured at all.
if [ -z "$(med udp udp_pingpong_busy_median_us)" ]; then
  say "udp-pingpong: no busy-polling figure (the machine is busy?): once more"
  run udp timeout -k 5 900 "$baseline" udp-pingpong --iters "$pingpong_iters" "${blast_flags[@]}"
fi

# --- figures ----------------------------------------------------------------
plain_4124=$(med blast udp_blast_plain_4124B_rx_GBps)
gro_4124=$(med blast udp_blast_gso_gro_4124B_rx_GBps)
mmsg_fc_64=$(med blast udp_blast_mmsg32_fc_64B_rx_pps)
busy_rtt=$(med udp udp_pingpong_busy_median_us)
raw_rtt=$(med rawudp udp_pingpong_uroce_style_median_us)
ucx_bw=$(med ucx_bw ucx_bw)
ucx_lat=$(med ucx_lat ucx_p50_us)
write=$(med write write_bw_65536)
no_offload=$(med plain write_bw_65536)
lat=$(med lat send_lat_64)
rtt=$(times "$lat" 2)
rate=$(times "$(med rate write_msgrate_8)" 1e6)
ib_lat=$(med ib_send_lat ib_send_lat_64)
pingpong=$(med rc_pingpong rc_pingpong_64)
one_qp=$(med one_qp write_bw_4096)
many_bw=$(med many write_bw_4096)
beyond=$(med many qp_bytes_beyond_rings)
retry=$(med many retry_exceeded_err)
retry_open=$(med many_open retry_exceeded_err)
share=$(med many_open slowest_qp_share)
finish=$(med many_open slowest_qp_finish)
many_shared_bw=$(med many_shared write_bw_4096)
retry_shared_open=$(med many_shared_open retry_exceeded_err)
share_shared=$(med many_shared_open slowest_qp_share)
e_send=$(med engine engine_send_8b_pps_nodigest)
e_write=$(med engine engine_write_64k_mtu4096_goodput_nodigest)
e_send_swarm=$(med engine engine_send_8b_pps)
e_write_swarm=$(med engine engine_write_64k_mtu4096_goodput)

# emit NAME VALUE UNIT NOTE: one metric line (n/a when a run gave nothing).
missing=0
emit() {
  if [ -z "$2" ]; then missing=$((missing + 1)); fi
  echo "metric=$1 value=${2:-n/a} unit=$3  # $4"
}
# Shorthands for the notes: the figure for people, with its unit.
f() { echo "$(fig "$1") $2"; }
contaminated=$(cat "$tmp"/blast.* "$tmp"/udp.* 2> /dev/null | grep -c '^# CONTAMINATED' || true)
echo
echo "# vs-peers $(date -u +%FT%TZ) at $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo '?'):" \
  "median of $runs run(s) each; load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$contaminated baseline measurement(s) while other processes ran$([ "$quick" = 1 ] && echo '; QUICK: not a measurement')"
echo "# P1 bandwidth: RC WRITE 64 KiB, two processes, default settings"
emit ratio_write_bw_64KiB_to_ucx_am_bw "$(ratio "$write" "$ucx_bw")" x \
  "$(f "$write" GB/s) vs UCX/tcp ucp_am_bw 64 KiB $(f "$ucx_bw" GB/s); target >= 1.0"
emit ratio_write_bw_64KiB_to_gso_gro "$(ratio "$write" "$gro_4124")" x \
  "vs udp_blast_gso_gro_4124B $(f "$gro_4124" GB/s); target >= 0.5"
emit ratio_write_bw_64KiB_to_plain "$(ratio "$write" "$plain_4124")" x \
  "vs udp_blast_plain_4124B $(f "$plain_4124" GB/s)"
emit ratio_write_bw_64KiB_no_offload_to_plain "$(ratio "$no_offload" "$plain_4124")" x \
  "with --no-offload $(f "$no_offload" GB/s)"
echo "# P2 latency: RC SEND 64 B, two processes"
emit ratio_send_lat_64B_to_ucx_tag_lat "$(ratio "$lat" "$ucx_lat")" x \
  "uroce bench t_typical $(f "$lat" us) one way vs UCX/tcp tag_lat 64 B median $(f "$ucx_lat" us); target <= 1.0"
emit ratio_ib_send_lat_64B_to_ucx_tag_lat "$(ratio "$ib_lat" "$ucx_lat")" x \
  "ib_send_lat on uroce's libibverbs t_typical $(f "$ib_lat" us); target <= 1.0"
emit ratio_send_rtt_64B_to_uroce_style_udp "$(ratio "$rtt" "$raw_rtt")" x \
  "RTT 2 x t_typical $(f "$rtt" us) vs raw UDP in uroce's socket style $(f "$raw_rtt" us); target <= 1.5"
emit ratio_send_rtt_64B_to_busy_udp "$(ratio "$rtt" "$busy_rtt")" x \
  "vs udp_pingpong_busy_median, connected sockets $(f "$busy_rtt" us)"
emit ratio_rc_pingpong_64B_to_uroce_style_udp "$(ratio "$pingpong" "$raw_rtt")" x \
  "ibv_rc_pingpong -s 64 on uroce's libibverbs $(f "$pingpong" us/iter); must not grow"
echo "# P3 message rate: 8 B RDMA WRITE, batched posts, two processes"
emit ratio_write_msgrate_8B_to_mmsg32_fc "$(ratio "$rate" "$mmsg_fc_64")" x \
  "$(f "$rate" msg/s) vs udp_blast_mmsg32_fc_64B $(f "$mmsg_fc_64" datagrams/s); target >= 1.0"
echo "# P4 scale: $many_qps RC QPs, 4 KiB WRITEs, two processes"
emit ratio_write_bw_many_qps_to_1qp "$(ratio "$many_bw" "$one_qp")" x \
  "$many_qps QPs $(f "$many_bw" GB/s) aggregate vs 1 QP $(f "$one_qp" GB/s); target >= 0.8"
emit ratio_write_bw_many_qps_shared_port_to_1qp "$(ratio "$many_shared_bw" "$one_qp")" x \
  "the same with UROCE_SOURCE_PORTS=shared (one source port per device) $(f "$many_shared_bw" GB/s); target >= 0.8"
emit ratio_qp_bytes_beyond_rings_to_2KiB "$(ratio "$beyond" 2048)" x \
  "process RSS per QP beyond its rings $(f "$beyond" B); target <= 1.0 (stretch 0.5)"
emit many_qps_retry_exceeded_err "$retry" errors \
  "retry-exceeded completions on the client's device, uroce bench's defaults (since efbb6f3 no cap in the tool: the device's transmit budget, UROCE_TX_BUDGET 1024)"
emit many_qps_open_loop_retry_exceeded_err "$retry_open" errors \
  "the same with --max-inflight 0 (every WR posted at once, as perftest): the device's own bursts; target 0"
emit ratio_slowest_qp_share "$share" x \
  "the $many_qps-QP runs with --max-inflight 0 (the device's arbitration): the slowest QP's service rate (messages from its first post to its last completion) over the mean QP's (its span $(fig "$finish") of the run); no QP starves: target >= 0.5"
emit many_qps_shared_port_open_loop_retry_exceeded_err "$retry_shared_open" errors \
  "--max-inflight 0 with UROCE_SOURCE_PORTS=shared; target 0"
emit ratio_slowest_qp_share_shared_port "$share_shared" x \
  "the slowest QP's share with UROCE_SOURCE_PORTS=shared, --max-inflight 0; target >= 0.5"
echo "# P5 engine: two HCAs on the simulated fabric, one thread, trace_packet_digests off"
emit ratio_engine_send_8B_to_2Mpps "$(ratio "$e_send" 2000000)" x \
  "8 B SEND $(f "$e_send" packets/s) (the swarm's fabric, digests on: $(f "$e_send_swarm" packets/s)); target >= 1.0"
emit ratio_engine_write_64KiB_to_2GBps "$(ratio "$e_write" 2)" x \
  "64 KiB WRITE $(f "$e_write" GB/s) goodput (digests on: $(f "$e_write_swarm" GB/s)); target >= 1.0"

row() { printf '| %s | %s | %s | %s | %s |\n' "$@"; }
echo
row "target" "uroce" "reference, same run" "ratio" "goal"
row "---" "---" "---" "---" "---"
row "P1 WRITE 64 KiB" "$(f "$write" GB/s)" "UCX/tcp ucp_am_bw $(f "$ucx_bw" GB/s)" "$(ratio "$write" "$ucx_bw")" ">= 1.0"
row "P1 WRITE 64 KiB" "$(f "$write" GB/s)" "UDP gso_gro 4124 B $(f "$gro_4124" GB/s)" "$(ratio "$write" "$gro_4124")" ">= 0.5"
row "P1 WRITE 64 KiB --no-offload" "$(f "$no_offload" GB/s)" "UDP plain 4124 B $(f "$plain_4124" GB/s)" "$(ratio "$no_offload" "$plain_4124")" "-"
row "P2 SEND 64 B one way, uroce bench" "$(f "$lat" us)" "UCX/tcp tag_lat $(f "$ucx_lat" us)" "$(ratio "$lat" "$ucx_lat")" "<= 1.0"
row "P2 SEND 64 B one way, ib_send_lat" "$(f "$ib_lat" us)" "UCX/tcp tag_lat $(f "$ucx_lat" us)" "$(ratio "$ib_lat" "$ucx_lat")" "<= 1.0"
row "P2 SEND 64 B RTT" "$(f "$rtt" us)" "raw UDP, uroce's sockets $(f "$raw_rtt" us)" "$(ratio "$rtt" "$raw_rtt")" "<= 1.5"
row "P2 SEND 64 B RTT" "$(f "$rtt" us)" "raw UDP, connected $(f "$busy_rtt" us)" "$(ratio "$rtt" "$busy_rtt")" "-"
row "P2 ibv_rc_pingpong 64 B" "$(f "$pingpong" us/iter)" "raw UDP, uroce's sockets $(f "$raw_rtt" us)" "$(ratio "$pingpong" "$raw_rtt")" "no slower"
row "P3 WRITE 8 B rate" "$(f "$rate" msg/s)" "UDP mmsg32 fc 64 B $(f "$mmsg_fc_64" /s)" "$(ratio "$rate" "$mmsg_fc_64")" ">= 1.0"
row "P4 $many_qps QPs, WRITE 4 KiB" "$(f "$many_bw" GB/s)" "1 QP $(f "$one_qp" GB/s)" "$(ratio "$many_bw" "$one_qp")" ">= 0.8"
row "P4 $many_qps QPs, shared source port" "$(f "$many_shared_bw" GB/s)" "1 QP $(f "$one_qp" GB/s)" "$(ratio "$many_shared_bw" "$one_qp")" ">= 0.8"
row "P4 memory per QP beyond rings" "$(f "$beyond" B)" "2 KiB" "$(ratio "$beyond" 2048)" "<= 1.0"
row "P4 retry exceeded, defaults / --max-inflight 0" "${retry:-n/a} / ${retry_open:-n/a}" "-" "-" "0 / 0"
row "P4 slowest QP's share, --max-inflight 0" "$(fig "$share")" "the mean QP" "$(fig "$share")" ">= 0.5 (no QP starves)"
row "P4 shared port: retry exceeded / slowest share, --max-inflight 0" "${retry_shared_open:-n/a} / $(fig "$share_shared")" "-" "-" "0 / >= 0.5"
row "P5 engine 8 B SEND" "$(f "$e_send" pkt/s)" "2 M pkt/s" "$(ratio "$e_send" 2000000)" ">= 1.0"
row "P5 engine 64 KiB WRITE" "$(f "$e_write" GB/s)" "2 GB/s" "$(ratio "$e_write" 2)" ">= 1.0"

echo
echo "# each run:"
for m in "blast udp_blast_plain_4124B_rx_GBps" "blast udp_blast_gso_gro_4124B_rx_GBps" \
  "blast udp_blast_mmsg32_fc_64B_rx_pps" "udp udp_pingpong_busy_median_us" \
  "rawudp udp_pingpong_uroce_style_median_us" "ucx_bw ucx_bw" "ucx_lat ucx_p50_us" \
  "write write_bw_65536" "plain write_bw_65536" "lat send_lat_64" "rate write_msgrate_8" \
  "ib_send_lat ib_send_lat_64" "rc_pingpong rc_pingpong_64" "one_qp write_bw_4096" \
  "many write_bw_4096" "many_shared write_bw_4096" "many qp_bytes_beyond_rings" "many_open slowest_qp_share" \
  "many_open slowest_qp_finish" "many_open retry_exceeded_err" "engine engine_send_8b_pps_nodigest" \
  "engine engine_write_64k_mtu4096_goodput_nodigest"; do
  read -r key name <<< "$m"
  echo "#   $key $name: $(each "$key" "$name")"
done
say "done in $(($(date +%s) - start)) s; $missing figure(s) missing"
[ "$missing" = 0 ]
