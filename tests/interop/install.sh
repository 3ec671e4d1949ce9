#!/bin/bash
# install.sh - installs the host packages the interop matrix needs (tests/interop/matrix.sh), when missing.
# Debian (bookworm: vm/build.sh takes the VM's kernel and rdma-core from the host's apt sources), as root.
# Idempotent: when every tool is there and apt has package lists, it only says so. Exit 0 when all is in place.
#
#   qemu-system-x86  the VM (qemu-system-x86_64, TCG)        cpio, gzip, kmod  vm/build.sh packs the initramfs
#   gcc, libc6-dev   vm/build.sh compiles rxe-opcodes.c        iproute2          `ip`, for matrix.sh's own netns
#   ibverbs-utils, perftest  the host side of the lib_ rows     python3-minimal   oob-relay.py (lib_ rows)
#   rdmacm-utils     the host side of the RDMA CM rows (rping, ucmatose, udaddy)
#   tshark           the RDMA CM rows: their captures must decode as CM MADs in Wireshark's dissector
set -euo pipefail

# tool or file -> package
NEEDS=(
  "qemu-system-x86_64 qemu-system-x86"
  "cpio cpio"
  "gzip gzip"
  "depmod kmod"
  "gcc gcc"
  "/usr/include/stdio.h libc6-dev"
  "ip iproute2"
  "unshare util-linux"
  "timeout coreutils"
  "ibv_rc_pingpong ibverbs-utils"
  "ib_write_bw perftest"
  "python3 python3-minimal"
  "rping rdmacm-utils"
  "tshark tshark"
)
missing=()
for need in "${NEEDS[@]}"; do
  what=${need% *} pkg=${need#* }
  case "$what" in
    /*) [ -e "$what" ] ;;
    *) command -v "$what" >/dev/null 2>&1 ;;
  esac || missing+=("$pkg")
done
# build.sh resolves the kernel and the rdma-core packages with apt-cache, which needs package lists
lists=0; compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null && lists=1

if [ ${#missing[@]} -eq 0 ] && [ $lists = 1 ]; then
  echo "install.sh: nothing to do (qemu, cpio, gzip, kmod, gcc, libc6-dev, iproute2, ibverbs-utils, perftest, python3, rdmacm-utils, tshark present; apt lists present)"
  exit 0
fi
command -v apt-get >/dev/null || { echo "install.sh: no apt-get: the interop VM needs a Debian bookworm host" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "install.sh: missing ${missing[*]:-apt package lists}; run as root to install" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)
log=$(mktemp /tmp/interop-install.XXXXXX)
if ! apt-get update -qq > "$log" 2>&1; then
  echo "install.sh: apt-get update failed:" >&2; tail -20 "$log" >&2; rm -f "$log"; exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >> "$log" 2>&1; then
    echo "install.sh: apt-get install ${missing[*]} failed:" >&2; tail -20 "$log" >&2; rm -f "$log"; exit 1
  fi
  echo "install.sh: installed ${missing[*]} ($(( $(date +%s) - t0 )) s, apt-get update included)"
else
  echo "install.sh: refreshed the apt package lists ($(( $(date +%s) - t0 )) s)"
fi
rm -f "$log"
