#!/bin/bash
# matrix.sh - the interop matrix: uroce against Linux rdma_rxe (Soft-RoCE) in a qemu VM, in both directions.
#
# usage: matrix.sh --uroce PATH [--kernel K[,K]] [--list] [--rows PATTERN] [--jobs N] [--out DIR] [--self-check]
#   --uroce PATH    the uroce command (runs the uroce side of every row, and `uroce decode` of every capture)
#   --kernel K      the VM's Linux: 6.1 (Debian 12's default kernel, the default) or 6.12 (Debian 12's
#                   linux-image-6.12-amd64: rxe with ATOMIC_WRITE and FLUSH, and its own rows); "6.1,6.12" runs
#                   the matrix once per kernel, one summary each. Each kernel has its own image and artifacts:
#                   $RXEVM_BUILD/linux-K/ (the .deb cache $RXEVM_BUILD/debs is shared)
#   --list          print the rows and exit
#   --rows PATTERN  run only the rows whose id (CASE/u2r or CASE/r2u) matches this extended regex
#   --jobs N        run N VM boots at a time (default 1; on 2 cores more does not help)
#   --out DIR       where artifacts go (default $RXEVM_BUILD/matrix/<date-time>, linked as .../latest)
#   --self-check    run each row's VM commands against a SECOND VM instead of uroce: proves the VM side
#                   (commands, markers, output checks, capture checks) without uroce
#
# A row is one tool run between the VM (169.254.0.1/16, rdma_rxe) and uroce (169.254.0.2/16) on one QEMU
# socket-netdev link: the VM sends each Ethernet frame as a UDP datagram from 127.0.0.1:LPORT to RPORT, and
# uroce joins the segment with UROCE_LINK=127.0.0.1:RPORT,127.0.0.1:LPORT UROCE_ADDR=169.254.0.2/16.
# Direction u2r (uroce->rxe): uroce is the requester/client, the VM the server. r2u (rxe->uroce): the reverse.
# Rows that share a direction and a link MTU run in one VM boot (a script of rows, each bounded by a timeout
# inside the guest and framed by MATRIX-BEGIN/MATRIX-END markers on the console); the uroce side of each row
# starts when the VM's console shows the row's BEGIN marker. Each row gets its own TCP port, so a row that
# hangs on one side can never be answered by the next row's tool.
# lib_* rows run the SAME Debian tool on both sides: on the host it runs on uroce's libibverbs.so.1 (`uroce run
# --link ... -- TOOL`), and its out-of-band TCP (kernel sockets) reaches the VM through QEMU's user network on a
# second NIC (eth1: hostfwd for a VM server, guestfwd for a VM client) and oob-relay.py; RoCE stays on eth0.
#
# Checks per row: both sides exit 0; both outputs show that data moved (pingpong's "N iters in", perftest's
# result row, rxe-opcodes' OK); the row's slice of the qemu capture (`uroce decode --format tsv`) has RoCEv2
# frames, icrc_bad=0, malformed=0 and the expected path MTU; loss rows must show retransmitted PSNs.
# Exit status 0 only when every selected row passed.
#
# Env: RXEVM_BUILD (the VM images' dir, default tests/interop/build), MATRIX_KERNEL (--kernel), MATRIX_BASEPORT (47200: boot slot k uses UDP
# ports BASEPORT+2k and BASEPORT+2k+1 on 127.0.0.1), MATRIX_NETNS=0 (do not isolate the run in a network
# namespace of its own; by default, as root, everything runs in a fresh namespace with only loopback, so no
# packet of a misbehaving tool can leave the machine).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=$HERE/vm
# (exported: the run in its own network namespace below sees RXEVM_BUILD already set to the kernel's image dir)
BASE=${MATRIX_BUILD_BASE:-${RXEVM_BUILD:-$HERE/build}}
export MATRIX_BUILD_BASE=$BASE
BASEPORT=${MATRIX_BASEPORT:-47200}
VM_IP=169.254.0.1 UROCE_IP=169.254.0.2
VM_MAC=525400000001             # run-vm.sh derives the MAC from the IPv4 address's last octet
OOB_HOST=10.0.2.100             # lib rows: the host as a VM client sees it (QEMU guestfwd, see oob_rules)
TSHARK=${TSHARK:-tshark}         # cm rows: decodes the CM MADs of the capture
OOB_SHIFT=10000                 # lib rows: the host port of a VM server's hostfwd is its TCP port + this

usage() { sed -n '2,18p' "$0"; }
ORIG_ARGS=("$@")
UROCE= LIST=0 PATTERN= JOBS=1 OUT= SELF=0 KERNEL=${MATRIX_KERNEL:-6.1}
while [ $# -gt 0 ]; do
  case "$1" in
    --uroce) UROCE=${2:-}; shift ;;
    --kernel) KERNEL=${2:-}; shift ;;
    --list) LIST=1 ;;
    --rows) PATTERN=${2:-}; shift ;;
    --jobs) JOBS=${2:-}; shift ;;
    --out) OUT=${2:-}; shift ;;
    --self-check) SELF=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "matrix.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac; shift
done
case "$JOBS" in ''|*[!0-9]*|0) echo "matrix.sh: --jobs wants a number >= 1, not '$JOBS'" >&2; exit 2 ;; esac
[ "$JOBS" -le 10 ] || { echo "matrix.sh: --jobs $JOBS: at most 10 boots at a time (UDP ports $BASEPORT-$((BASEPORT+19)))" >&2; exit 2; }

# ---- the kernel ----------------------------------------------------------------------------------------------
# Each kernel: the Debian metapackage whose dependency is its image (vm/build.sh: KMETA; KPKG overrides it).
kernel_meta() { case "$1" in 6.1) echo linux-image-amd64 ;; 6.12) echo linux-image-6.12-amd64 ;; *) return 1 ;; esac; }
if [[ "$KERNEL" == *,* ]]; then
  # one run per kernel, one after the other, each with its own summary; the status is 0 when both passed
  args=() skip=0 rc=0 verdicts=
  for a in "${ORIG_ARGS[@]}"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    case "$a" in --kernel|--out) skip=1; continue ;; esac
    args+=("$a")
  done
  for k in ${KERNEL//,/ }; do
    out=(); [ -n "$OUT" ] && out=(--out "$OUT/linux-$k")
    MATRIX_KERNEL= bash "$0" "${args[@]}" --kernel "$k" "${out[@]}"; st=$?
    [ $st = 0 ] || rc=1
    verdicts+="${verdicts:+; }Linux $k: $([ $st = 0 ] && echo passed || echo "FAILED (exit $st)")"
  done
  [ "$LIST" = 1 ] || echo "matrix: $verdicts"
  exit $rc
fi
KMETA=$(kernel_meta "$KERNEL") || { echo "matrix.sh: --kernel $KERNEL: the kernels are 6.1 and 6.12" >&2; exit 2; }
B=$BASE/linux-$KERNEL
export RXEVM_BUILD=$B RXEVM_DEBS=$BASE/debs KMETA

# ---- the rows ---------------------------------------------------------------------------------------------
# One case gives two rows, CASE/u2r and CASE/r2u. Fields:
#   case  link MTU (VM eth0 and UROCE_MTU)  loss seed (- for none)  guest timeout (s)
#   VM command (without -p PORT and host)  uroce command (without -p PORT, --timeout and host)
#   what both outputs must match (grep -E)  capture path-MTU check: =N (the largest RoCE payload is exactly N:
#   the row has multi-packet messages) or <=N;  optional: the CM messages the capture must hold (cm rows)
# A uroce command "cm": a lib row whose tools connect through the RDMA CM (librdmacm; the CM's MADs on QP1 of the
# link, no out-of-band TCP). Its VM command is "SERVER | CLIENT" when the roles take different options (else one
# command for both); @SRV@ in it stands for the server's address on the link (169.254.0.1 for u2r, .2 for r2u) and
# @PORT@ for the row's port, and nothing is appended to a command with placeholders (udaddy has no port option).
pp() { echo "^$1 iters in [0-9.]+ seconds"; }                    # ibv_*_pingpong's closing line
S='[[:space:]]+'
pt() { echo "^[[:space:]]*$1$S$2$S[0-9.]+$S[0-9.]+$S[0-9.]+"; }  # perftest's result row: bytes iters peak avg rate
OPC='(^|: )OK( |$)'                                               # rxe-opcodes' verdict
CASES=()
c() { CASES+=("$(printf '%s\x1f' "$@")"); }
# Both sides run the same tool, so one check (grep -E) holds for the server's output and the client's, whichever
# side uroce plays. The tools alternate, so a dead link (no frame from uroce in rows of two different tools in a
# row) is told apart from one broken tool.
#  case            link loss secs  VM command                                                uroce command                                        output check      pmtu
c rc_pingpong      1500 -    30   "ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -c"          "pingpong -g 1 -n 100 -s 4096 -c"                    "$(pp 100)"       "=1024"
c send_bw          1500 -    30   "ib_send_bw -d rxe0 -x 1 -F -n 100 -s 4096"               "perftest send_bw -x 1 -F -n 100 -s 4096"            "$(pt 4096 100)"  "=1024"
c uc_pingpong      1500 -    30   "ibv_uc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -c"          "pingpong --uc -g 1 -n 100 -s 4096 -c"               "$(pp 100)"       "=1024"
c opcodes          1500 -    40   "rxe-opcodes -g 1"                                        "opcodes -g 1"                                       "$OPC"            "<=1024"
c ud_pingpong      1500 -    30   "ibv_ud_pingpong -d rxe0 -g 1 -n 100 -s 512 -c"           "pingpong --ud -g 1 -n 100 -s 512 -c"                "$(pp 100)"       "<=1024"
c write_bw         1500 -    30   "ib_write_bw -d rxe0 -x 1 -F -n 100 -s 4096"              "perftest write_bw -x 1 -F -n 100 -s 4096"           "$(pt 4096 100)"  "=1024"
c srq_pingpong     1500 -    30   "ibv_srq_pingpong -d rxe0 -g 1 -n 100 -s 4096 -q 4 -c"    "pingpong --srq -q 4 -g 1 -n 100 -s 4096 -c"         "$(pp 100)"       "=1024"
c read_bw          1500 -    30   "ib_read_bw -d rxe0 -x 1 -F -n 100 -s 4096"               "perftest read_bw -x 1 -F -n 100 -s 4096"            "$(pt 4096 100)"  "=1024"
c atomic_faa       1500 -    30   "ib_atomic_bw -d rxe0 -x 1 -F -n 100 -A FETCH_AND_ADD"    "perftest atomic_bw -x 1 -F -n 100 -A FETCH_AND_ADD" "$(pt 8 100)"     "<=1024"
c atomic_cas       1500 -    30   "ib_atomic_bw -d rxe0 -x 1 -F -n 100 -A CMP_AND_SWAP"     "perftest atomic_bw -x 1 -F -n 100 -A CMP_AND_SWAP"  "$(pt 8 100)"     "<=1024"
c send_bw_ud       1500 -    30   "ib_send_bw -d rxe0 -x 1 -F -n 100 -s 512 -c UD"          "perftest send_bw -x 1 -F -n 100 -s 512 -c UD"       "$(pt 512 100)"   "<=1024"
c write_bw_uc      1500 -    30   "ib_write_bw -d rxe0 -x 1 -F -n 100 -s 4096 -c UC"        "perftest write_bw -x 1 -F -n 100 -s 4096 -c UC"     "$(pt 4096 100)"  "=1024"
c read_bw_small    1500 -    30   "ib_read_bw -d rxe0 -x 1 -F -n 100 -s 256"                "perftest read_bw -x 1 -F -n 100 -s 256"             "$(pt 256 100)"   "<=1024"
c rc_pingpong_ipv6 1500 -    30   "ibv_rc_pingpong -d rxe0 -g 0 -n 100 -s 4096 -c"          "pingpong -g 0 -n 100 -s 4096 -c"                    "$(pp 100)"       "=1024"
c rc_pingpong_loss 1500 11   60   "ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096 -c"           "pingpong -g 1 -n 50 -s 4096 -c"                     "$(pp 50)"        "=1024"
c read_bw_loss     1500 12   60   "ib_read_bw -d rxe0 -x 1 -F -n 50 -s 4096"                "perftest read_bw -x 1 -F -n 50 -s 4096"             "$(pt 4096 50)"   "=1024"
c rc_pingpong_4k   4200 -    45   "ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 16384 -m 4096 -c" "pingpong -g 1 -n 100 -s 16384 -m 4096 -c"           "$(pp 100)"       "=4096"
c write_bw_4k      4200 -    45   "ib_write_bw -d rxe0 -x 1 -F -n 100 -s 16384 -m 4096"     "perftest write_bw -x 1 -F -n 100 -s 16384 -m 4096"  "$(pt 16384 100)" "=4096"
c ud_pingpong_4k   4200 -    45   "ibv_ud_pingpong -d rxe0 -g 1 -n 100 -s 4096 -c"          "pingpong --ud -g 1 -n 100 -s 4096 -c"               "$(pp 100)"       "=4096"
c opcodes_4k       4200 -    45   "rxe-opcodes -g 1 -m 4096"                                "opcodes -g 1 -m 4096"                               "$OPC"            "<=4096"
c read_bw_4k       4200 -    45   "ib_read_bw -d rxe0 -x 1 -F -n 100 -s 16384 -m 4096"      "perftest read_bw -x 1 -F -n 100 -s 16384 -m 4096"   "$(pt 16384 100)" "=4096"
# IBA 1.5 (Linux 6.12 only: rxe 6.1 has neither). atomic_write: rxe-opcodes -S awrite (ibv_wr_atomic_write) both ways,
# every 8-byte word checked in the target's memory and read back. flush: uroce sends a FLUSH to an MR and a QP
# without flush access (rdma-core 44 can grant none, and has no ibv_wr_flush: rxe can only be the target), and
# its completion must be what rxe 6.12 answers (docs/interop.md).
c atomic_write     1500 -    30   "rxe-opcodes -g 1 -S awrite"                              "opcodes -g 1 -S awrite"                             "$OPC"            "<=1024"
c flush            1500 -    30   "rxe-opcodes -g 1 -S flush"                               "opcodes -g 1 -S flush"                              "$OPC"            "<=1024"
# lib_*: the SAME Debian binary on both sides: in the VM on rxe, on the host on uroce's libibverbs.so.1
# (`uroce run --link ... --addr ... --mtu ... [--faults ...] -- TOOL`, the VM command with -d uroce0 for -d rxe0:
# uroce command "lib"). Their out-of-band TCP goes through QEMU's user network (eth1) and oob-relay.py: a VM
# client connects to 10.0.2.100:PORT (guestfwd), a host client to 127.0.0.1:PORT (the relay, then hostfwd).
# lib_uc_pingpong: here the host learns the VM's MAC from the first RoCE packet's ARP (the out-of-band TCP does not
# cross the link); the L2 transport holds Linux's unres_qlen_bytes meanwhile, so the first 4-packet UC message
# survives it (UC never resends: with a hold of 3 packets, as before, the row hung).
c lib_rc_pingpong  1500 -    30   "ibv_rc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -c"          lib                                                  "$(pp 100)"       "=1024"
c lib_uc_pingpong  1500 -    30   "ibv_uc_pingpong -d rxe0 -g 1 -n 100 -s 4096 -c"          lib                                                  "$(pp 100)"       "=1024"
c lib_write_bw     1500 -    30   "ib_write_bw -d rxe0 -x 1 -F -n 100 -s 4096"              lib                                                  "$(pt 4096 100)"  "=1024"
c lib_ud_pingpong  1500 -    30   "ibv_ud_pingpong -d rxe0 -g 1 -n 100 -s 512 -c"           lib                                                  "$(pp 100)"       "<=1024"
c lib_read_bw      1500 -    30   "ib_read_bw -d rxe0 -x 1 -F -n 100 -s 4096"               lib                                                  "$(pt 4096 100)"  "=1024"
c lib_srq_pingpong 1500 -    30   "ibv_srq_pingpong -d rxe0 -g 1 -n 100 -s 4096 -q 4 -c"    lib                                                  "$(pp 100)"       "=1024"
c lib_send_bw      1500 -    30   "ib_send_bw -d rxe0 -x 1 -F -n 100 -s 4096"               lib                                                  "$(pt 4096 100)"  "=1024"
c lib_atomic_bw    1500 -    30   "ib_atomic_bw -d rxe0 -x 1 -F -n 100 -A FETCH_AND_ADD"    lib                                                  "$(pt 8 100)"     "<=1024"
c lib_send_lat     1500 -    30   "ib_send_lat -d rxe0 -x 1 -F -n 100 -s 4096"              lib                                                  "$(pt 4096 100)"  "=1024"
c lib_rc_pingpong_loss 1500 13 60 "ibv_rc_pingpong -d rxe0 -g 1 -n 50 -s 4096 -c"           lib                                                  "$(pp 50)"        "=1024"
# cm rows: the same librdmacm tools on both sides, uroce's librdmacm.so.1 and the device's CM on the host, the
# kernel's rdma_cm and ib_cm in the VM. The capture must hold the CM messages named (uroce decode's CM[...], and
# tshark must decode them as CM MADs). A last field marks a row known to fail, and why: its FAIL is an XFAIL, which
# fails no run (MATRIX_STRICT=1 counts it as a FAIL); a marked row that passes says so (docs/interop.md); a mark
# "u2r:WHY" or "r2u:WHY" holds for one direction.
# perftest -R u2r: its client sends the test connection's REQ at once after the exchange, and the VM's server
# listens again only later (REJ 8, not retried; the XFAIL until 2026-11-26): uroce's client runs under a fault
# scenario that sends that REQ 500 ms late, as a slower client would (scenarios/slow-test-req.toml)
declare -A USCEN
USCEN[lib_send_bw_rdmacm/u2r]="$HERE/scenarios/slow-test-req.toml"
# The ibv_rc_pingpong loss rows: their random loss spares the last exchanges, where a lost final ACK would
# leave one side retransmitting to a peer that already exited (scenarios/pingpong-loss.toml); a row with a
# scenario and a loss seed runs the scenario with that seed instead of the plain loss=0.05 fault spec
for d in u2r r2u; do
  USCEN[rc_pingpong_loss/$d]="$HERE/scenarios/pingpong-loss.toml"
  USCEN[lib_rc_pingpong_loss/$d]="$HERE/scenarios/pingpong-loss.toml"
done
c lib_rping        1500 -    20   "rping -s -a @SRV@ -p @PORT@ -C 10 -S 64 -V -v | rping -c -a @SRV@ -p @PORT@ -C 10 -S 64 -V -v" cm  "ping data: rdma-ping-9: " "<=1024" "REQ REP RTU"
c lib_ucmatose     1500 -    20   "ucmatose -b @SRV@ -p @PORT@ -c 2 | ucmatose -s @SRV@ -p @PORT@ -c 2"   cm                     "data transfers complete"  "<=1024" "REQ REP RTU"
c lib_udaddy       1500 -    20   "udaddy -b @SRV@ | udaddy -s @SRV@"                                     cm                     "data transfers complete"  "<=1024" "SIDR_REQ SIDR_REP"
c lib_send_bw_rdmacm 1500 -    20   "ib_send_bw -d rxe0 -x 1 -F -n 100 -s 4096 -R -p @PORT@ | ib_send_bw -d rxe0 -x 1 -F -n 100 -s 4096 -R -p @PORT@ @SRV@" cm "$(pt 4096 100)" "=1024" "REQ REP RTU"

# Cases for some kernels or directions only (space-separated lists); cases the self-check cannot run (why); what
# a case's capture must hold besides (opcode names of `uroce decode --format tsv`, each at least once); marks of a
# known failure for one kernel (KMARK[CASE/DIR@KERNEL]=WHY, as the case's last field does for every kernel).
declare -A ONLY_KERNEL=() ONLY_DIR=() NO_SELF=() HOLDS=() KMARK=()
ONLY_KERNEL[atomic_write]=6.12 ONLY_KERNEL[flush]=6.12
ONLY_DIR[flush]=u2r
NO_SELF[flush]="rdma-core 44 has no ibv_wr_flush: rxe cannot be the FLUSH's sender"
HOLDS[atomic_write]="RC_ATOMIC_WRITE RC_RDMA_READ_REQUEST"
HOLDS[flush]="RC_FLUSH"
# rxe answers an ATOMIC_WRITE with a zero-length RDMA READ RESPONSE ONLY with an ACK AETH (IBA 1.5; rxe_resp.c
# send_read_response_ack); uroce's requester took READ responses only for READ WQEs and retried until the retries ran
# out (XFAIL until 2026-11-26); it now takes that answer, and its responder gives the same one
# rxe 6.12 sometimes crashes the VM's kernel: a double fault in rxe_requester's skb allocation (rxe_init_packet,
# kworker rxe_wq), seen in lib_send_lat/u2r (2026-11-26) and send_bw/r2u (2026-11-27), each once in several whole
# runs, with rxe as the sender. A row whose VM panics so runs once more in a fresh boot (PANIC_AGAIN); a second
# panic fails it. Any other panic fails the row at once; the rows after it always get a fresh boot.
declare -A PANIC_AGAIN=()

# Expand the cases into rows (arrays indexed by row number).
R_HOLDS=() R_ID=() R_DIR=() R_LINK=() R_LOSS=() R_SECS=() R_VM=() R_U=() R_CHECK=() R_PMTU=() R_PORT=() R_LIB=() R_CM=() R_CMSG=() R_KNOWN=()
n=0
for dir in u2r r2u; do
  for entry in "${CASES[@]}"; do
    IFS=$'\x1f' read -r name link loss secs vm u check pmtu cmsg known <<< "$entry"
    [ -z "${ONLY_KERNEL[$name]:-}" ] || [[ " ${ONLY_KERNEL[$name]} " == *" $KERNEL "* ]] || continue
    [ -z "${ONLY_DIR[$name]:-}" ] || [[ " ${ONLY_DIR[$name]} " == *" $dir "* ]] || continue
    [ "$SELF" = 1 ] && [ -n "${NO_SELF[$name]:-}" ] && continue
    R_ID[n]=$name/$dir R_DIR[n]=$dir R_LINK[n]=$link R_LOSS[n]=$loss R_SECS[n]=$secs R_VM[n]=$vm R_U[n]=$u
    R_CHECK[n]=$check R_PMTU[n]=$pmtu R_PORT[n]=$((19000 + n)) R_LIB[n]=0 R_CM[n]=0 R_CMSG[n]=${cmsg:-} R_KNOWN[n]=${known:-}
    # a mark "u2r:WHY" or "r2u:WHY" holds for that direction only
    case "${known:-}" in u2r:*|r2u:*) if [ "${known%%:*}" = "$dir" ]; then R_KNOWN[n]=${known#*:}; else R_KNOWN[n]=; fi ;; esac
    [ -n "${KMARK[$name/$dir@$KERNEL]:-}" ] && R_KNOWN[n]="${R_KNOWN[n]:+${R_KNOWN[n]}; }Linux $KERNEL: ${KMARK[$name/$dir@$KERNEL]}"
    R_HOLDS[n]=${HOLDS[$name]:-}
    # a lib row: the host runs the VM's tool on uroce's library (the uroce field is the host tool's command)
    [ "$u" = lib ] && R_LIB[n]=1 R_U[n]=${vm//-d rxe0/-d uroce0}
    # a cm row: a lib row without out-of-band TCP (the uroce field "cm"; see the cases)
    [ "$u" = cm ] && R_LIB[n]=1 R_CM[n]=1 R_U[n]=${vm//-d rxe0/-d uroce0}
    n=$((n + 1))
  done
done
ROWS_ALL=$n
srv_addr() { if [ "${R_DIR[$1]}" = u2r ]; then echo $VM_IP; else echo $UROCE_IP; fi; }  # ROW: the server's link address
# role_cmd CMD ROLE ROW: CMD for ROLE (server|client): its part of "SERVER | CLIENT", with the placeholders
# filled in (@SRV@ the server's address, @PORT@ the row's port), else with "-p PORT" (and a client's host) appended
role_cmd() {
  local cmd=$1 role=$2 i=$3 host
  case "$cmd" in *' | '*) if [ "$role" = server ]; then cmd=${cmd%% | *}; else cmd=${cmd#* | }; fi ;; esac
  case "$cmd" in *@*) cmd=${cmd//@SRV@/$(srv_addr "$i")}; echo "${cmd//@PORT@/${R_PORT[i]}}"; return ;; esac
  host=; [ "$role" = client ] && host=$(srv_addr "$i")
  [ "$role" = client ] && [ "${R_LIB[i]}" = 1 ] && [ "${R_CM[i]}" = 0 ] && host=${4:-}   # lib rows: the out-of-band path
  echo "$cmd -p ${R_PORT[i]}${host:+ $host}"
}
dirname_of() { [ "$1" = u2r ] && echo "uroce->rxe" || echo "rxe->uroce"; }
tail_file() { echo "   -- $2, last lines:"; tail -n 15 "$1" 2>/dev/null | sed 's/^/   | /'; }
record() {  # ROW RESULT SECS REASON: one line of results/ROW.tsv, and a progress line
  # a row marked known-to-fail (R_KNOWN, unless MATRIX_STRICT=1): its FAIL is an XFAIL, which fails no run
  if [ -n "${R_KNOWN[$1]}" ] && [ "${MATRIX_STRICT:-0}" != 1 ]; then
    case "$2" in
      FAIL) set -- "$1" XFAIL "$3" "known: ${R_KNOWN[$1]}; $4" ;;
      PASS) set -- "$1" PASS "$3" "$4; marked known-to-fail (${R_KNOWN[$1]}), but passed: drop the mark" ;;
    esac
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "${R_ID[$1]}" "$(dirname_of "${R_DIR[$1]}")" "$2" "$3" "$4" > "$OUT/results/row$(printf %03d "$1").tsv"
  printf '  %-24s %-11s %-4s %5ss  %s\n' "${R_ID[$1]}" "$(dirname_of "${R_DIR[$1]}")" "$2" "$3" "$4"
}

SEL=()
for ((i = 0; i < ROWS_ALL; i++)); do
  [ -z "$PATTERN" ] || echo "${R_ID[i]}" | grep -qE -- "$PATTERN" || continue
  SEL+=("$i")
done

if [ "$LIST" = 1 ]; then
  printf '%-24s %-11s %-5s %-5s %s\n' row direction link loss 'VM command  |  uroce command'
  for i in "${SEL[@]}"; do
    u="uroce ${R_U[i]}"; [ "${R_LIB[i]}" = 1 ] && u="uroce run -- ${R_U[i]}"
    vm=${R_VM[i]}
    if [ "${R_CM[i]}" = 1 ]; then   # the commands of each side's role, the server's address filled in
      vr=server ur=client; [ "${R_DIR[i]}" = r2u ] && vr=client ur=server
      vm=$(role_cmd "${R_VM[i]}" $vr "$i") u="uroce run -- $(role_cmd "${R_U[i]}" $ur "$i")  (capture: CM ${R_CMSG[i]})"
    fi
    printf '%-24s %-11s %-5s %-5s %s\n%47s| %s\n' "${R_ID[i]}" "$(dirname_of "${R_DIR[i]}")" "${R_LINK[i]}" \
      "${R_LOSS[i]}" "$vm" '' "$u"
  done
  exit 0
fi
[ "${#SEL[@]}" -gt 0 ] || { echo "matrix.sh: no row matches '$PATTERN' (see --list)" >&2; exit 2; }
[ -n "$UROCE" ] || { echo "matrix.sh: --uroce PATH is required (the uroce command; see --help)" >&2; exit 2; }
case "$UROCE" in /*) ;; *) UROCE=$PWD/$UROCE ;; esac
[ -x "$UROCE" ] || { echo "matrix.sh: --uroce $UROCE: not an executable file" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || { echo "matrix.sh: qemu-system-x86_64 is missing (tests/interop/install.sh)" >&2; exit 2; }


now() { echo "$EPOCHREALTIME"; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b-a}'; }

# ---- the image (before the namespace: build.sh downloads Debian packages) ----------------------------------
if [ -z "${MATRIX_IN_NETNS:-}" ]; then
  export MATRIX_T_START MATRIX_BUILD_S
  MATRIX_T_START=$(now)
  mkdir -p "$B"
  if ! bash "$VMDIR/build.sh" > "$B/build.log" 2>&1; then
    echo "matrix.sh: the VM image did not build; the end of $B/build.log:" >&2; tail -20 "$B/build.log" >&2; exit 1
  fi
  MATRIX_BUILD_S=$(dt "$MATRIX_T_START" "$(now)")
fi
T_START=$MATRIX_T_START BUILD_S=$MATRIX_BUILD_S
KVER=$(cat "$B/KVER" 2>/dev/null || echo "$KERNEL")

# ---- a network namespace of our own (root): only loopback, nothing leaves the machine -----------------------
if [ "${MATRIX_NETNS:-1}" != 0 ] && [ -z "${MATRIX_IN_NETNS:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null && unshare -n true 2>/dev/null; then
    export MATRIX_IN_NETNS=1
    exec unshare -n -- bash -c 'ip link set lo up && exec bash "$@"' matrix "$0" "${ORIG_ARGS[@]}"
  fi
  echo "matrix.sh: note: running in the host's network namespace (needs root, unshare and ip to isolate)" >&2
fi

if [ -z "$OUT" ]; then
  OUT=$B/matrix/$(date +%Y%m%d-%H%M%S)
  mkdir -p "$OUT"; ln -sfn "$(basename "$OUT")" "$B/matrix/latest"
fi
mkdir -p "$OUT/rows" "$OUT/boots" "$OUT/results"
rm -f "$OUT"/results/* "$OUT/.dead-link"
MODE=uroce; [ "$SELF" = 1 ] && MODE=self-check
echo "matrix: ${#SEL[@]} rows ($MODE), rxe of Linux $KVER; VM image in $B (build.sh ${BUILD_S} s); artifacts in $OUT"

# ---- boots: rows of one direction and link MTU, packed while the guest script stays short --------------------
# The script travels base64-encoded on the kernel command line (run-vm.sh refuses more than 2000 characters).
SCRIPT_BUDGET=1150
guest_line() {   # ROW ROLE(server|client): the rxevm-row line that runs ROW's VM command in that role
  local i=$1 role=$2
  # a VM client of a lib row reaches the host through QEMU's guestfwd
  local cmd; cmd=$(role_cmd "${R_VM[i]}" "$role" "$i" $OOB_HOST)
  # rxe's IPv4-mapped GID is usually at index 1, not always: one Linux 6.12 boot listed the IPv6 link-local
  # GID at 0 and again at 1, and the IPv4 one at 2. The guest script looks the index up first (run_boot).
  cmd=${cmd// -g 1 / -g \$G }; cmd=${cmd// -x 1 / -x \$G }
  if [ "$role" = server ]; then
    echo "rxevm-row ${R_ID[i]} ${R_SECS[i]} $cmd"
  else
    echo "rxevm-row --client ${R_ID[i]} ${R_SECS[i]} $cmd"
  fi
}
# lib rows need the Debian tool on the host (and python3 for oob-relay.py): without it they fail here, unrun
PY=/usr/bin/python3; [ -x "$PY" ] || PY=$(command -v python3 || true)
RUNSEL=()
for i in "${SEL[@]}"; do
  if [ "${R_LIB[i]}" = 1 ] && [ "$SELF" = 0 ]; then
    tool=${R_U[i]%% *} miss=
    command -v "$tool" >/dev/null || miss="no $tool on the host (tests/interop/install.sh: ibverbs-utils, perftest, rdmacm-utils)"
    [ -n "$PY" ] || miss="${miss:+$miss; }no python3 on the host (oob-relay.py)"
    if [ -n "$miss" ]; then record "$i" FAIL 0 "not run: $miss"; continue; fi
  fi
  RUNSEL+=("$i")
done
[ "$SELF" = 1 ] && [ -z "$PY" ] && { echo "matrix.sh: no python3 on the host (oob-relay.py, the lib rows)" >&2; exit 2; }
case "$HERE$OUT" in *,*) echo "matrix.sh: a comma in $HERE or $OUT: QEMU's forwarding rules cannot name it" >&2; exit 2 ;; esac

BOOTS=()      # each: space-separated row numbers
cur= curlen=0 curkey=
for i in "${RUNSEL[@]}"; do
  key=${R_DIR[i]}-${R_LINK[i]}-${R_LIB[i]}-${R_CM[i]}
  len=$(( $(guest_line "$i" client | wc -c) ))
  if [ -n "$cur" ] && { [ "$key" != "$curkey" ] || [ $((curlen + len)) -gt $SCRIPT_BUDGET ]; }; then
    BOOTS+=("$cur"); cur= curlen=0
  fi
  cur="${cur:+$cur }$i" curlen=$((curlen + len)) curkey=$key
done
[ -n "$cur" ] && BOOTS+=("$cur")

# ---- helpers -------------------------------------------------------------------------------------------------
# (no pipe into `grep -q`: under pipefail, grep quitting at the first match can fail the writer with SIGPIPE)
console_has() { [ -f "$1" ] && grep -aqF -- "$2" "$1"; }
row_status() {  # CONSOLE ID: the status on the row's MATRIX-END line (empty when there is none yet)
  [ -f "$1" ] && tr -d '\r' < "$1" | lift_kernel_lines | sed -n "s|^MATRIX-END $2 status=\([0-9]*\).*|\1|p" | sed -n 1p
}
last_words() {  # FILE: what a failed tool said last: its last error-like line, else its last line (cut short)
  local said; said=$(grep -av '^MATRIX-\|^+ ' "$1" 2>/dev/null | grep -a '[^[:space:]]')
  { grep -ai "error" <<< "$said" || grep -aiE "fail|couldn't|unable|invalid|timeout|usage" <<< "$said" || echo "$said"; } |
    tail -1 | cut -c1-160
}
# The guest kernel writes its messages ("[   12.754791] rxe0: qp#17 ...") straight to the serial console, and
# one may land in the middle of a line a tool is printing: "4096  100  34[  12.7] rxe0: ...\n7.92 ...". This
# lifts each such message onto a line of its own, before the line it cut, and joins the cut line again.
lift_kernel_lines() {
  awk '{ line = held $0; held = ""
         if (match(line, /\[ *[0-9]+\.[0-9]+\] /) && RSTART > 1) {
           print substr(line, RSTART); held = substr(line, 1, RSTART - 1); next }
         print line }
       END { if (held != "") print held }'
}
row_output() {  # CONSOLE ID: the console lines of one row, markers included, kernel messages on lines of their own
  [ -f "$1" ] || return 0
  tr -d '\r' < "$1" | lift_kernel_lines |
    awk -v b="MATRIX-BEGIN $2" -v e="MATRIX-END $2 " '$0==b{on=1} on{print} on&&index($0,e)==1{exit}'
}
# what_it_said FILE: for a row whose output lacks the expected line, what it printed last (the last two lines
# that are not markers, rules or blank) and what the guest kernel said during the row, on one line
what_it_said() {
  local last kernel
  last=$(grep -av '^MATRIX-\|^ *-*$\|^\[ *[0-9]*\.[0-9]*\] ' "$1" 2>/dev/null | tail -2 | tr -s ' \t' ' ' | paste -sd'|' | cut -c1-200)
  kernel=$(grep -a '^\[ *[0-9]*\.[0-9]*\] ' "$1" 2>/dev/null | sed 's/^\[ *[0-9.]*\] //' | head -2 | paste -sd'|' | cut -c1-200)
  echo "it ended: ${last:-nothing}${kernel:+; kernel: $kernel}"
}
# pcap_cut FILE START LIMIT: walks the capture's records from byte START (a record boundary) up to byte LIMIT
# and prints "END FRAMES PEER": the last complete record boundary, the frames in between, and how many of
# them came from a MAC other than the VM's (so: from the peer).
pcap_cut() {
  [ -f "$1" ] && [ "$3" -gt "$2" ] || { echo "$2 0 0"; return; }
  tail -c +$(($2 + 1)) "$1" | head -c $(($3 - $2)) | od -An -v -tu1 | awk -v start="$2" -v vm="$VM_MAC" '
    { for (k = 1; k <= NF; k++) {
        b = $k + 0
        if (st == 0) { h[hp++] = b; if (hp == 16) { len = h[8] + h[9]*256 + h[10]*65536 + h[11]*16777216; hp = 0; fp = 0; mac = ""; st = 1 } }
        else { if (fp >= 6 && fp < 12) mac = mac sprintf("%02x", b); fp++ }
        pos++
        if (st == 1 && fp == len) { st = 0; last = pos; frames++; if (mac != vm) peer++ }
      } }
    END { printf "%d %d %d\n", start + last, frames + 0, peer + 0 }'
}
pcap_slice() {  # FILE FROM TO DEST: the global header plus the records in [FROM, TO)
  { head -c 24 "$1" 2>/dev/null; [ "$3" -gt "$2" ] && tail -c +$(($2 + 1)) "$1" | head -c $(($3 - $2)); } > "$4"
}
kill_tree() { [ -n "${1:-}" ] && kill "$1" 2>/dev/null; }    # a `timeout` we started: it passes SIGTERM on
size_of() { stat -c %s "$1" 2>/dev/null || echo 24; }

# judge ROW: the verdict on one row that ran, from its artifacts. Uses the boot's variables (con, peercon, pcap,
# vmrole, pos, and the row's U_STATUS/U_NOTE/LIMIT); moves pos to the row's end in the capture; sets
# ROW_FAILED and ROW_PEER_FRAMES.
judge() {
  local r=$1 id=${R_ID[$1]} rlog=$OUT/rows/${R_ID[$1]//\//.} dir=${R_DIR[$1]}
  row_output "$con" "$id" > "$rlog.vm.log"
  [ "$SELF" = 1 ] && row_output "$peercon" "$id" > "$rlog.peer.log"
  local end frames peer
  read -r end frames peer <<< "$(pcap_cut "$pcap" "$pos" "${LIMIT[r]}")"
  pcap_slice "$pcap" "$pos" "$end" "$rlog.pcap"; pos=$end
  # the TSV lines and the tally (a wrapper around uroce may print lines of its own)
  "$UROCE" decode --format tsv "$rlog.pcap" 2> "$rlog.decode.err" | grep -aE $'^[0-9]+\t|^# frames=' > "$rlog.tsv"
  local dstatus=${PIPESTATUS[0]}
  local why=() vstatus pstatus tally check=${R_CHECK[r]}
  vstatus=$(row_status "$con" "$id")
  if [ -z "$vstatus" ]; then why+=("VM: no MATRIX-END")
  elif [ "$vstatus" != 0 ]; then why+=("VM exit $vstatus: $(last_words "$rlog.vm.log")")
  elif ! grep -aqE -- "$check" "$rlog.vm.log"; then why+=("VM output lacks /$check/ ($(what_it_said "$rlog.vm.log"))"); fi
  if [ "$SELF" = 1 ]; then
    pstatus=$(row_status "$peercon" "$id")
    if [ -z "$pstatus" ]; then why+=("peer VM: no MATRIX-END")
    elif [ "$pstatus" != 0 ]; then why+=("peer VM exit $pstatus: $(last_words "$rlog.peer.log")")
    elif ! grep -aqE -- "$check" "$rlog.peer.log"; then why+=("peer VM output lacks /$check/ ($(what_it_said "$rlog.peer.log"))"); fi
  else
    local us=${U_STATUS[r]}
    if [ "$us" = 124 ]; then why+=("uroce timed out")
    elif [ "$us" != 0 ]; then why+=("uroce exit $us: $(last_words "$rlog.uroce.log")")
    elif ! grep -aqE -- "$check" "$rlog.uroce.log"; then why+=("uroce output lacks /$check/ ($(what_it_said "$rlog.uroce.log"))"); fi
    [ -n "${U_NOTE[r]}" ] && why+=("${U_NOTE[r]}")
  fi
  tally=$(grep '^# frames=' "$rlog.tsv" | tail -1)
  local roce icrc_bad malformed maxpay retrans
  roce=$(sed -n 's/.* roce=\([0-9]*\).*/\1/p' <<< "$tally"); icrc_bad=$(sed -n 's/.* icrc_bad=\([0-9]*\).*/\1/p' <<< "$tally")
  malformed=$(sed -n 's/.* malformed=\([0-9]*\).*/\1/p' <<< "$tally")
  maxpay=$(awk -F'\t' '!/^#/ && $9+0 > m {m = $9+0} END {print m+0}' "$rlog.tsv")
  # retransmitted requests: the same (source, QP, PSN, opcode) more than once, ACKs and NAKs left out
  retrans=$(awk -F'\t' '!/^#/ && $5 !~ /ACKNOWLEDGE/ {n[$2" "$6" "$7" "$4]++} END {r=0; for (k in n) if (n[k] > 1) r += n[k]-1; print r}' "$rlog.tsv")
  if [ -z "$tally" ]; then why+=("capture: decode gave no tally (status $dstatus: $(head -c 200 "$rlog.decode.err"))")
  else
    [ "${icrc_bad:-1}" = 0 ] || why+=("capture: icrc_bad=$icrc_bad")
    [ "${malformed:-1}" = 0 ] || why+=("capture: malformed=$malformed")
    if [ "${roce:-0}" -gt 0 ]; then
      local want=${R_PMTU[r]#*=}
      case "${R_PMTU[r]}" in
        =*) [ "$maxpay" = "$want" ] || why+=("capture: largest payload $maxpay, path MTU $want expected") ;;
        *)  [ "$maxpay" -le "$want" ] || why+=("capture: largest payload $maxpay > path MTU $want") ;;
      esac
      if [ "${R_LOSS[r]}" != - ] && [ "${R_CM[r]}" = 0 ] && [ "$SELF" = 0 ] && [ "$retrans" = 0 ]; then why+=("capture: loss row without a retransmit"); fi
      # rows named *_ipv6 run over the link-local GIDs: every RoCE frame must be IPv6
      local v4; v4=$(awk -F'\t' '!/^#/ && $2 !~ /:/ {n++} END {print n+0}' "$rlog.tsv")
      case "$id" in *_ipv6/*) [ "$v4" = 0 ] || why+=("capture: $v4 RoCE frames over IPv4 in an IPv6 row") ;; esac
      # the opcodes the row is about must be on the wire (R_HOLDS: names in uroce decode's TSV)
      local op
      for op in ${R_HOLDS[r]}; do
        awk -F'\t' -v op="$op" '!/^#/ && $5 == op {f=1} END {exit !f}' "$rlog.tsv" || why+=("capture: no $op")
      done
    else
      why+=("capture: no RoCEv2 frame")
    fi
  fi
  local cmfacts=
  if [ "${R_CM[r]}" = 1 ]; then
    # cm rows: the CM's MADs on QP1, as uroce decode spells them out (CM[REQ ...]) and as tshark reads them
    # (its InfiniBand dissector: "CM: ConnectRequest"); every MAD to QP1 must be a CM message
    "$UROCE" decode "$rlog.pcap" 2>> "$rlog.decode.err" | grep -a ' CM\[\| MAD\[' > "$rlog.cm"
    local m tsn seen=
    grep -aq ' MAD\[' "$rlog.cm" && why+=("capture: $(grep -ac ' MAD\[' "$rlog.cm") MADs that are no CM message")
    if command -v "$TSHARK" >/dev/null; then
      "$TSHARK" -r "$rlog.pcap" -Y infiniband -T fields -e _ws.col.Info > "$rlog.tshark" 2>> "$rlog.decode.err"
    else
      why+=("capture: no tshark to decode the CM MADs (tests/interop/install.sh)")
    fi
    for m in ${R_CMSG[r]}; do
      grep -aq " CM\[$m " "$rlog.cm" || why+=("capture: no CM $m (uroce decode)")
      case $m in REQ) tsn=ConnectRequest ;; REP) tsn=ConnectReply ;; RTU) tsn=ReadyToUse ;;
        SIDR_REQ) tsn=ServiceIDResReq ;; SIDR_REP) tsn=ServiceIDResReqResp ;; *) tsn=$m ;; esac
      if [ -f "$rlog.tshark" ] && ! grep -aqE "CM: $tsn([^A-Za-z]|\$)" "$rlog.tshark"; then why+=("capture: tshark shows no CM $tsn")
      else seen+=" $m"; fi
    done
    cmfacts=" cm=$(grep -ac ' CM\[' "$rlog.cm"):${seen# }"
  fi
  local facts="roce=${roce:-?} icrc_bad=${icrc_bad:-?} maxpay=$maxpay retrans=$retrans peer_frames=$peer$cmfacts"
  ROW_PEER_FRAMES=$peer
  if [ ${#why[@]} -eq 0 ]; then
    local extra=; [ "${R_LOSS[r]}" != - ] && [ "$SELF" = 1 ] && extra="; no faults injected (VM peer)"
    record "$r" PASS "${SECS[r]}" "$facts$extra"; ROW_FAILED=0
  else
    local reason; reason=$(printf '%s; ' "${why[@]}"); reason=${reason%; }
    record "$r" FAIL "${SECS[r]}" "$reason ($facts)"; ROW_FAILED=1
    {
      echo "---- $id ($(dirname_of "$dir")) FAILED: $reason"
      tail_file "$rlog.vm.log" "VM side ($rlog.vm.log)"
      if [ "$SELF" = 1 ]; then tail_file "$rlog.peer.log" "peer VM side ($rlog.peer.log)"
      else tail_file "$rlog.uroce.log" "uroce side ($rlog.uroce.log)"; fi
      echo "   capture: ${tally:-no tally} (decode status $dstatus; $rlog.tsv)"
    } >&2
  fi
}

# oob_rules ROLE LOG ROW...: the --oob-fwd options of run-vm.sh that give the lib rows among ROW... their
# out-of-band TCP path, for a VM in ROLE (server|client). A VM server gets hostfwd=tcp:127.0.0.1:PORT+OOB_SHIFT-:PORT;
# a VM client reaches 10.0.2.100:PORT, where QEMU's guestfwd runs oob-relay.py for each connection, relaying it to
# 127.0.0.1:PORT (the host tool, on uroce) or, in self-check mode, to 127.0.0.1:PORT+OOB_SHIFT (the other VM's
# hostfwd). The relay tries again while nothing listens behind its target (see oob-relay.py).
oob_rules() {
  local role=$1 log=$2 i p t; shift 2
  for i in "$@"; do
    [ "${R_LIB[i]}" = 1 ] && [ "${R_CM[i]}" = 0 ] || continue   # cm rows: no out-of-band TCP
    p=${R_PORT[i]}
    if [ "$role" = server ]; then
      echo "--oob-fwd"; echo "hostfwd=tcp:127.0.0.1:$((p + OOB_SHIFT))-:$p"
    else
      t=$p; [ "$SELF" = 1 ] && t=$((p + OOB_SHIFT))
      echo "--oob-fwd"; echo "guestfwd=tcp:$OOB_HOST:$p-cmd:'$PY' '$HERE/oob-relay.py' --log '$log' --to 127.0.0.1:$t"
    fi
  done
}

# cm_client SECS LOG CMD...: a cm row's host client: runs CMD, again (1 s apart, while more than 3 of SECS are left)
# while its connect fails the way it does before the VM's server listens (ib_cm's REJ "no listener", an address or
# SIDR request nobody answers yet); appends the output to LOG, one line per failed try
CM_RETRY='RDMA_CM_EVENT_(REJECTED|UNREACHABLE|ADDR_ERROR|ROUTE_ERROR|CONNECT_ERROR)|Unexpected CM event|Connection refused|Couldn.t connect|Failed to connect|unreachable'
cm_client() {
  local secs=$1 log=$2 end rc; shift 2; end=$((SECONDS + secs))
  while :; do
    "$@" > "$log.try" 2>&1; rc=$?
    if [ $rc != 0 ] && [ $((end - SECONDS)) -gt 3 ] && grep -aqE "$CM_RETRY" "$log.try"; then
      echo "(matrix: connect failed, again in 1 s: $(grep -aE "$CM_RETRY" "$log.try" | head -1 | cut -c1-120))" >> "$log"
      sleep 1; continue
    fi
    cat "$log.try" >> "$log"; rm -f "$log.try"; return $rc
  done
}

# run_boot TAG SLOT ROW...: boots one VM (plus a second one in self-check mode) and runs these rows (one
# direction, one link MTU). With uroce, a row whose VM side still waits when uroce has given up ends the boot
# (that is quicker than the row's guest timeout): the rows after it are left in REMAINING for a fresh boot.
run_boot() {
  local tag=$1 slot=$2; shift 2
  local rows=("$@")
  local lport=$((BASEPORT + 2 * slot)) rport=$((BASEPORT + 2 * slot + 1))
  local first=${rows[0]} link=${R_LINK[${rows[0]}]} dir=${R_DIR[${rows[0]}]}
  tag=$tag-$dir-mtu$link
  local con=$OUT/boots/$tag.vm.log pcap=$OUT/boots/$tag.pcap peercon=$OUT/boots/$tag.peer.log
  local vmrole=server; [ "$dir" = r2u ] && vmrole=client
  local peerrole=client; [ "$vmrole" = client ] && peerrole=server
  local script='G=$(rxevm-gid-index)'$'\n' pscript='G=$(rxevm-gid-index)'$'\n' budget=120 i
  REMAINING=
  # self-check: both VMs pause 1 s after each row, so the harness marks the row's end in the capture before
  # the next row's frames come (with uroce, the harness itself starts each row's uroce side)
  [ "$SELF" = 1 ] && script+="export MATRIX_GAP=1"$'\n' pscript+="export MATRIX_GAP=1"$'\n'
  for i in "${rows[@]}"; do
    script+="$(guest_line "$i" $vmrole)"$'\n'; pscript+="$(guest_line "$i" $peerrole)"$'\n'
    budget=$((budget + R_SECS[i] + 15))
  done
  if [ -f "$OUT/.dead-link" ]; then
    for i in "${rows[@]}"; do record "$i" SKIP 0 "not run: $(cat "$OUT/.dead-link")"; done; return
  fi
  rm -f "$con" "$peercon" "$pcap"
  # lib rows: the out-of-band TCP path (QEMU user network forwards; a relay for host clients)
  local fwd=() pfwd=() listen=() relaypid= relaylog=$OUT/boots/$tag.relay.log
  mapfile -t fwd < <(oob_rules $vmrole "$relaylog" "${rows[@]}")
  [ "$SELF" = 1 ] && mapfile -t pfwd < <(oob_rules $peerrole "$relaylog" "${rows[@]}")
  if [ "$SELF" = 0 ] && [ "$vmrole" = server ]; then
    for i in "${rows[@]}"; do
      [ "${R_LIB[i]}" = 1 ] && [ "${R_CM[i]}" = 0 ] && listen+=(--listen "${R_PORT[i]}=$((R_PORT[i] + OOB_SHIFT))")
    done
  fi
  if [ ${#listen[@]} -gt 0 ]; then
    # the host tool (client) connects to 127.0.0.1:PORT: the relay passes it on to the VM's hostfwd
    timeout -k 5 "$budget" "$PY" "$HERE/oob-relay.py" --log "$relaylog" "${listen[@]}" >> "$relaylog" 2>&1 &
    relaypid=$!
  fi
  local t0; t0=$(now)
  timeout -k 5 "$budget" "$VMDIR/run-vm.sh" --name rxe --ip $VM_IP/16 --lport $lport --rport $rport --mtu "$link" \
    "${fwd[@]}" --pcap "$pcap" --log "$con" --cmd "$script" > "$OUT/boots/$tag.qemu.err" 2>&1 &
  local vmpid=$! peerpid=
  if [ "$SELF" = 1 ]; then
    # the second VM stands where uroce stands: 169.254.0.2, on the other end of the same link
    timeout -k 5 "$budget" "$VMDIR/run-vm.sh" --name peer --ip $UROCE_IP/16 --lport $rport --rport $lport --mtu "$link" \
      "${pfwd[@]}" --log "$peercon" --cmd "$pscript" > "$OUT/boots/$tag.peer.qemu.err" 2>&1 &
    peerpid=$!
  fi
  local active= pos=24 abandon= stop= r ran=() n=0
  local -a LIMIT=() U_STATUS=() U_NOTE=() SECS=()
  for r in "${rows[@]}"; do
    n=$((n + 1))
    local id=${R_ID[r]} rlog=$OUT/rows/${R_ID[r]//\//.}
    if [ -n "$stop" ]; then REMAINING+=" $r"; continue; fi
    if [ -n "$abandon" ] || [ -f "$OUT/.dead-link" ]; then
      record "$r" SKIP 0 "not run: ${abandon:-$(cat "$OUT/.dead-link" 2>/dev/null)}"; continue
    fi
    local rt0; rt0=$(now)
    # 1. the VM reaches this row (the first one waits for the boot, which is not the row's time)
    local limit=20; [ "$r" = "$first" ] && limit=150
    local waited=0
    until console_has "$con" "MATRIX-BEGIN $id"; do
      if ! kill -0 $vmpid 2>/dev/null || [ "$waited" -ge $((limit * 5)) ]; then break; fi
      sleep 0.2; waited=$((waited + 1))
    done
    if ! console_has "$con" "MATRIX-BEGIN $id"; then
      abandon="the VM never reached row $id"
      record "$r" FAIL "$(dt "$rt0" "$(now)")" "the VM never started this row (console: $con)"
      tail_file "$con" "VM console" >&2; continue
    fi
    [ -z "$active" ] && active=$(dt "$t0" "$(now)") && echo "$active" > "$OUT/results/$tag.active_s"
    rt0=$(now)
    # 2. the uroce side (or nothing: the peer VM runs its own script)
    local upid= ustatus= note= ut0=
    if [ "$SELF" = 0 ] && [ "${R_CM[r]}" = 1 ]; then
      # a cm row: the tool on uroce's libibverbs and librdmacm, no out-of-band TCP; a client tries again while
      # the VM's server does not listen yet (cm_client)
      local urole=server; [ "$dir" = u2r ] && urole=client
      local ucmd; ucmd=$(role_cmd "${R_U[r]}" $urole "$r")
      local run=(run --link "127.0.0.1:$rport,127.0.0.1:$lport" --addr "$UROCE_IP/16" --mtu "$link")
      [ "${R_LOSS[r]}" != - ] && run+=(--faults "${R_LOSS[r]}")   # a cm row's loss field: a fault spec
      [ -n "${USCEN[$id]:-}" ] && run+=(--scenario "${USCEN[$id]}")
      echo "+ uroce ${run[*]} -- $ucmd" > "$rlog.uroce.log"
      ut0=$(now)
      local wrap=(); [ $urole = client ] && wrap=(bash -c "$(declare -f cm_client); cm_client \"\$@\"" cm_client "${R_SECS[r]}" "$rlog.uroce.log")
      if [ $urole = client ]; then
        timeout -k 5 $((R_SECS[r] + 10)) env -u UROCE_FAULTS -u UROCE_CAPTURE -u UROCE_LINK -u UROCE_TAP CM_RETRY="$CM_RETRY" \
          "${wrap[@]}" "$UROCE" "${run[@]}" -- $ucmd &
      else
        timeout -k 5 $((R_SECS[r] + 10)) env -u UROCE_FAULTS -u UROCE_CAPTURE -u UROCE_LINK -u UROCE_TAP \
          "$UROCE" "${run[@]}" -- $ucmd >> "$rlog.uroce.log" 2>&1 &
      fi
      upid=$!
    elif [ "$SELF" = 0 ] && [ "${R_LIB[r]}" = 1 ]; then
      # the VM's tool on uroce's library; a client connects to 127.0.0.1 (oob-relay.py, then the VM's hostfwd)
      local host=; [ "$dir" = u2r ] && host=127.0.0.1
      local run=(run --link "127.0.0.1:$rport,127.0.0.1:$lport" --addr "$UROCE_IP/16" --mtu "$link")
      if [ -n "${USCEN[$id]:-}" ]; then
        run+=(--scenario "${USCEN[$id]}")
        [ "${R_LOSS[r]}" != - ] && run+=(--scenario-seed "${R_LOSS[r]}")
      elif [ "${R_LOSS[r]}" != - ]; then
        run+=(--faults "loss=0.05,seed=${R_LOSS[r]}")
      fi
      echo "+ uroce ${run[*]} -- ${R_U[r]} -p ${R_PORT[r]}${host:+ $host}" > "$rlog.uroce.log"
      ut0=$(now)
      timeout -k 5 $((R_SECS[r] + 10)) env -u UROCE_FAULTS -u UROCE_CAPTURE -u UROCE_LINK -u UROCE_TAP \
        "$UROCE" "${run[@]}" -- ${R_U[r]} -p "${R_PORT[r]}" $host >> "$rlog.uroce.log" 2>&1 &
      upid=$!
    elif [ "$SELF" = 0 ]; then
      local host=; [ "$dir" = u2r ] && host=$VM_IP
      local env=(UROCE_LINK=127.0.0.1:$rport,127.0.0.1:$lport UROCE_ADDR=$UROCE_IP/16 UROCE_MTU=$link)
      if [ -n "${USCEN[$id]:-}" ]; then
        env+=(UROCE_SCENARIO="${USCEN[$id]}")
        [ "${R_LOSS[r]}" != - ] && env+=(UROCE_SCENARIO_SEED="${R_LOSS[r]}")
      elif [ "${R_LOSS[r]}" != - ]; then
        env+=(UROCE_FAULTS=loss=0.05,seed=${R_LOSS[r]})
      fi
      echo "+ ${env[*]} uroce ${R_U[r]} -p ${R_PORT[r]} --timeout 20${host:+ $host}" > "$rlog.uroce.log"
      ut0=$(now)
      timeout -k 5 $((R_SECS[r] + 10)) env -u UROCE_FAULTS -u UROCE_CAPTURE "${env[@]}" \
        "$UROCE" ${R_U[r]} -p "${R_PORT[r]}" --timeout 20 $host >> "$rlog.uroce.log" 2>&1 &
      upid=$!
    fi
    # 3. wait for both sides, each bounded
    local vend= pend= uend= deadline=$(( (R_SECS[r] + 15) * 5 )) ticks=0
    while :; do
      [ -z "$vend" ] && [ -n "$(row_status "$con" "$id")" ] && vend=$ticks
      if [ "$SELF" = 1 ]; then
        [ -z "$pend" ] && [ -n "$(row_status "$peercon" "$id")" ] && pend=$ticks
        [ -n "$vend" ] && [ -n "$pend" ] && break
      else
        if [ -z "$uend" ] && ! kill -0 "$upid" 2>/dev/null; then wait "$upid"; ustatus=$?; uend=$ticks; fi
        [ -n "$vend" ] && [ -n "$uend" ] && break
        # the VM is done and uroce still waits (for a peer that went away): 10 s of grace, then stop it
        if [ -n "$vend" ] && [ -z "$uend" ] && [ $((ticks - vend)) -ge 50 ]; then
          kill_tree "$upid"; wait "$upid"; ustatus=$?; uend=$ticks
          note="uroce still ran 10 s after the VM's side ended; stopped"; break
        fi
        # uroce failed and the VM's side still waits for it: 3 s of grace, then this boot ends here
        [ -n "$uend" ] && [ "$ustatus" != 0 ] && [ -z "$vend" ] && [ $((ticks - uend)) -ge 15 ] && break
      fi
      kill -0 $vmpid 2>/dev/null || [ -n "$vend" ] || break
      [ "$ticks" -ge "$deadline" ] && break
      sleep 0.2; ticks=$((ticks + 1))
    done
    if [ "$SELF" = 0 ] && [ -z "$uend" ]; then kill_tree "$upid"; wait "$upid"; ustatus=$?; fi
    LIMIT[$r]=$(size_of "$pcap") U_STATUS[$r]=$ustatus U_NOTE[$r]=$note SECS[$r]=$(dt "$rt0" "$(now)")
    local uroce_s=0; [ -n "$ut0" ] && uroce_s=$(dt "$ut0" "$(now)")
    ran+=("$r")
    if [ -z "$vend" ] || { [ "$SELF" = 1 ] && [ -z "$pend" ]; }; then
      if [ "$SELF" = 0 ] && kill -0 $vmpid 2>/dev/null; then
        # the guest is still inside this row: the next rows get a fresh boot
        stop="the VM's side of $id did not end"; U_NOTE[$r]="${note:+$note; }the VM's side still waited: this boot ends here"
      elif [ "$SELF" = 0 ] && grep -aq "Kernel panic" "$con"; then
        # the guest's kernel died in this row (its console says how): the next rows get a fresh boot
        local oops; oops=$(tr -d '\r' < "$con" | grep -a -m1 -E 'Oops|BUG:|general protection|Kernel panic' | cut -c1-120)
        stop="the VM's kernel panicked in $id"; U_NOTE[$r]="${note:+$note; }the VM's kernel panicked (${oops# }; $con)"
        if [ -z "${PANIC_AGAIN[$r]:-}" ] && grep -aq "double fault" "$con" && grep -aq "rxe_init_packet" "$con"; then
          # rxe's known double fault (see PANIC_AGAIN): this row runs again first in the fresh boot, judged there
          PANIC_AGAIN[$r]=1 REMAINING=" $r"
          printf '  %-24s %-11s the VM'"'"'s kernel panicked (%s; %s): again in a fresh boot\n' \
            "$id" "$(dirname_of "${R_DIR[r]}")" "${oops# }" "$con"
          continue
        fi
      else
        abandon="the VMs are out of step after row $id"
      fi
    fi
    # 4. with uroce, judge now: a link that carries nothing from uroce ends the whole run
    if [ "$SELF" = 0 ]; then
      judge "$r"
      local tool=${R_U[r]%% *}
      if [ "$ROW_FAILED" = 1 ] && [ "${ROW_PEER_FRAMES:-0}" = 0 ]; then
        # a dead link fails every tool alike; one tool that is broken (or missing) fails only its own rows
        SILENT_ROWS+=" $id" SILENT_TOOLS+=" $tool"
        if [ "$(tr ' ' '\n' <<< "$SILENT_TOOLS" | sort -u | grep -c .)" -ge 2 ]; then
          echo "no frame from uroce reached the VM in consecutive rows of different tools:$SILENT_ROWS" > "$OUT/.dead-link"
        fi
      else
        SILENT_ROWS= SILENT_TOOLS=
      fi
    fi
  done
  # the guests power off when their scripts end; stop what is left
  local w=0
  while [ -z "$abandon$stop" ] && [ $w -lt 100 ] && { kill -0 $vmpid 2>/dev/null || { [ -n "$peerpid" ] && kill -0 "$peerpid" 2>/dev/null; }; }; do
    sleep 0.2; w=$((w + 1))
  done
  kill_tree $vmpid; [ -n "$peerpid" ] && kill_tree "$peerpid"; [ -n "$relaypid" ] && kill_tree "$relaypid"
  wait $vmpid 2>/dev/null; [ -n "$peerpid" ] && wait "$peerpid" 2>/dev/null; [ -n "$relaypid" ] && wait "$relaypid" 2>/dev/null
  # 5. self-check: judge once the VMs are gone (judging takes time, and the VMs do not wait for it)
  if [ "$SELF" = 1 ]; then for r in "${ran[@]}"; do judge "$r"; done; fi
}
# ---- run: JOBS workers, worker w takes boots w, w+JOBS, ... on UDP slot w ------------------------------------
echo "matrix: ${#BOOTS[@]} VM boots, $JOBS at a time, UDP ports $BASEPORT-$((BASEPORT + 2 * JOBS - 1))"
WORKERS=()
for ((w = 0; w < JOBS; w++)); do
  # a stopped worker stops its VMs and uroce (each a `timeout`, which passes the signal on)
  ( trap 'kill $(jobs -p) 2>/dev/null; exit 143' INT TERM
    SILENT_ROWS= SILENT_TOOLS=
    for ((k = w; k < ${#BOOTS[@]}; k += JOBS)); do
      rows=${BOOTS[k]} again=0
      while [ -n "$rows" ]; do
        tag=boot$k; [ $again -gt 0 ] && tag=boot$k.$again
        run_boot "$tag" "$w" $rows
        rows=$REMAINING again=$((again + 1))
      done
    done ) &
  WORKERS+=($!)
done
trap 'for p in "${WORKERS[@]}"; do kill "$p" 2>/dev/null; done' INT TERM
for p in "${WORKERS[@]}"; do wait "$p"; done

# ---- summary -------------------------------------------------------------------------------------------------
TOTAL_S=$(dt "$T_START" "$(now)")
SUM=$OUT/summary.tsv
printf 'row\tdirection\tresult\tseconds\tdetail\n' > "$SUM"
pass=0 fail=0 skip=0 xfail=0
for i in "${SEL[@]}"; do
  f=$OUT/results/row$(printf %03d "$i").tsv
  [ -f "$f" ] || printf '%s\t%s\tFAIL\t0\tno result (the boot did not run)\n' "${R_ID[i]}" "$(dirname_of "${R_DIR[i]}")" > "$f"
  cat "$f" >> "$SUM"
  case "$(cut -f3 "$f")" in PASS) pass=$((pass + 1)) ;; SKIP) skip=$((skip + 1)) ;; XFAIL) xfail=$((xfail + 1)) ;; *) fail=$((fail + 1)) ;; esac
done
boots=$(for f in "$OUT"/results/*.active_s; do [ -f "$f" ] && cat "$f"; done | tr '\n' ' ')
nboots=$(ls "$OUT"/boots/*.vm.log 2>/dev/null | wc -l)
echo
echo "==== interop matrix ($MODE), rxe of Linux $KVER: uroce $UROCE"
printf '%-24s %-11s %-6s %7s  %s\n' row direction result seconds detail
tail -n +2 "$SUM" | while IFS=$'\t' read -r id d res s detail; do
  printf '%-24s %-11s %-6s %7s  %s\n' "$id" "$d" "$res" "$s" "$detail"
done
xf=; [ "$xfail" -gt 0 ] && xf=", $xfail XFAIL (known to fail: see their detail)"
echo "matrix (Linux $KERNEL): ${#SEL[@]} rows: $pass PASS, $fail FAIL, $skip SKIP$xf; $nboots VM boots (seconds to the first row: ${boots:-none}); image build ${BUILD_S} s; total ${TOTAL_S} s"
echo "matrix: summary $SUM; per row: $OUT/rows/ (ROW.vm.log, ROW.uroce.log, ROW.pcap, ROW.tsv); consoles: $OUT/boots/"
[ $((pass + xfail)) = "${#SEL[@]}" ]
