#!/usr/bin/env python3
"""flush-icrc-relay.py - an experiment behind docs/interop.md's FLUSH finding (not used by matrix.sh).

Sits between uroce's L2 transport and a VM's socket netdev (one UDP datagram = one Ethernet frame) and passes
every frame on unchanged, except that it rewrites the ICRC of each RoCEv2 RC_FLUSH (opcode 0x1c, IPv4) going to
the VM into the value Linux rxe 6.12 computes for a FLUSH: rxe's opcode table gives RC_FLUSH no payload offset
(rxe_opcode.c: .offset has no [RXE_PAYLOAD]), so its ICRC runs over the pseudo-header and the FETH and RETH as
usual, and then over "the payload" from offset 0 of the transport header: BTH, FETH and RETH a second time.
A FLUSH with the IBA ICRC fails rxe's ICRC check and is dropped without a word (rcvd_pkts does not count it);
with this relay in between, rxe takes it and answers.

  flush-icrc-relay.py LISTEN_FOR_UROCE VM_PORT LISTEN_FOR_VM UROCE_PORT
  e.g. VM: run-vm.sh --lport 47300 --rport 47302; uroce: UROCE_LINK=127.0.0.1:47303,127.0.0.1:47304;
       relay: flush-icrc-relay.py 47303 47300 47302 47304
"""
import select
import socket
import struct
import sys
import zlib


def rxe_flush_icrc(frame: bytes) -> bytes:
    """The frame with its ICRC replaced by rxe 6.12's for an RC_FLUSH (IPv4, no VLAN)."""
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    total = struct.unpack("!H", ip[2:4])[0]
    ip = ip[:total]
    udp = ip[ihl:ihl + 8]
    transport = ip[ihl + 8:-4]  # BTH .. last header (a FLUSH has no payload)
    masked_ip = bytearray(ip[:ihl])
    masked_ip[1] = 0xFF  # TOS
    masked_ip[8] = 0xFF  # TTL
    masked_ip[10:12] = b"\xff\xff"  # header checksum
    masked_udp = bytearray(udp)
    masked_udp[6:8] = b"\xff\xff"
    masked_bth = bytearray(transport[:12])
    masked_bth[4] = 0xFF
    covered = b"\xff" * 8 + bytes(masked_ip) + bytes(masked_udp) + bytes(masked_bth) + transport[12:]
    covered += transport  # rxe's "payload" of a FLUSH: the headers again, from the BTH on
    icrc = struct.pack("<I", zlib.crc32(covered) & 0xFFFFFFFF)
    return frame[:14] + ip[:-4] + icrc + frame[14 + total:]


def is_rc_flush(frame: bytes) -> bool:
    if len(frame) < 14 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00":
        return False
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 17 or struct.unpack("!H", ip[ihl + 2:ihl + 4])[0] != 4791:
        return False
    return ip[ihl + 8] == 0x1C


def main():
    from_uroce, vm_port, from_vm, uroce_port = (int(a) for a in sys.argv[1:5])
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", from_uroce))
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.bind(("127.0.0.1", from_vm))
    rewritten = 0
    while True:
        ready, _, _ = select.select([a, b], [], [])
        for s in ready:
            frame, _ = s.recvfrom(65536)
            if s is a:
                if is_rc_flush(frame):
                    frame = rxe_flush_icrc(frame)
                    rewritten += 1
                    print(f"flush-icrc-relay: RC_FLUSH #{rewritten}: ICRC {frame[-4:].hex()} (rxe 6.12's)",
                          flush=True)
                b.sendto(frame, ("127.0.0.1", vm_port))
            else:
                a.sendto(frame, ("127.0.0.1", uroce_port))


if __name__ == "__main__":
    main()
