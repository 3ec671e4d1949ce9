//! The sending path's frame: an IPv4 RoCEv2 packet written straight into
//! the packet buffer, byte for byte what [`FrameRepr::ipv4`] and
//! [`FrameRepr::emit`] write, without building the frame representation
//! (an IP header repr with room for options, a UDP repr, a copy of the
//! transport repr) and without checking the transport repr twice; and
//! either IP version's frame written around a payload already in the
//! buffer (`emit_around_payload`).

#[cfg(doc)]
use super::FrameRepr;
use super::UDP_HEADER_LEN;
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{DEFAULT_TTL, MIN_HEADER_LEN, PROTOCOL_UDP};
use crate::{checksum, ipv6, roce, udp, Error, Opcode, Result, ROCEV2_UDP_PORT};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Writes the IPv4 frame `FrameRepr::ipv4(addrs, ip_id, src_port, roce)`
/// would emit into the start of `buf` (same bytes, same errors); returns
/// its length.
pub fn emit_ipv4(
    addrs: (Ipv4Addr, Ipv4Addr),
    ip_id: u16,
    src_port: u16,
    roce: &roce::Repr<'_>,
    buf: &mut [u8],
) -> Result<usize> {
    emit_ipv4_with(addrs, ip_id, src_port, roce, Payload::Copied, buf)
}

/// Where the transport payload of a packet with `opcode` starts in the
/// frame [`emit_around_payload`] writes from `local` (the IP header, UDP,
/// BTH and the opcode's extension headers come first). `None` for an
/// opcode the table does not know.
pub fn payload_offset(local: IpAddr, opcode: Opcode) -> Option<usize> {
    let ip_header_len = match local {
        IpAddr::V4(_) => MIN_HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    };
    Some(ip_header_len + UDP_HEADER_LEN + opcode.info()?.length)
}

/// Writes the frame of `roce` from `addrs.0` to `addrs.1` around a
/// `payload_len`-byte payload already in `buf` at
/// [`payload_offset`]`(addrs.0, roce.bth.opcode)`: the IP, UDP and
/// transport headers before it, pad and ICRC after it; the payload's
/// bytes are not moved. The bytes are those [`emit_ipv4`] (IPv4: the given
/// IP ID) and [`FrameRepr::ipv6`] (IPv6: no IP ID) write for the same
/// payload. `roce.payload` must be empty (the payload is the buffer's).
/// Returns the frame's length.
///
/// This is how a sender gathers a message's bytes straight into the
/// packet buffer, without a copy through a scratch buffer.
pub fn emit_around_payload(
    addrs: (IpAddr, IpAddr),
    ip_id: u16,
    src_port: u16,
    roce: &roce::Repr<'_>,
    payload_len: usize,
    buf: &mut [u8],
) -> Result<usize> {
    if !roce.payload.is_empty() {
        return Err(Error::Malformed("payload both in the repr and in the buffer"));
    }
    // Bounds the lengths added up below (a UDP datagram's is 16 bits).
    if payload_len > usize::from(u16::MAX) {
        return Err(Error::Malformed("packet too long for UDP"));
    }
    let payload = Payload::InPlace(payload_len);
    match addrs {
        (IpAddr::V4(local), IpAddr::V4(remote)) => {
            emit_ipv4_with((local, remote), ip_id, src_port, roce, payload, buf)
        }
        (IpAddr::V6(local), IpAddr::V6(remote)) => {
            emit_ipv6_around((local, remote), src_port, roce, payload_len, buf)
        }
        _ => Err(Error::Malformed("IPv4 and IPv6 addresses mixed")),
    }
}

/// Where a frame's transport payload comes from.
#[derive(Clone, Copy)]
enum Payload {
    /// The repr's payload, copied into the frame.
    Copied,
    /// This many bytes already in the buffer, where they belong.
    InPlace(usize),
}

fn emit_ipv4_with(
    addrs: (Ipv4Addr, Ipv4Addr),
    ip_id: u16,
    src_port: u16,
    roce: &roce::Repr<'_>,
    payload: Payload,
    buf: &mut [u8],
) -> Result<usize> {
    let payload_len = match payload {
        Payload::Copied => roce.payload.len(),
        Payload::InPlace(len) => len,
    };
    // What `udp_len_for` and `roce.buffer_len` give, from one check.
    let info = roce.check_with_payload_len(payload_len)?;
    let transport_len = info.length + payload_len + usize::from(roce.bth.pad_count) + ICRC_LEN;
    let udp_len = u16::try_from(UDP_HEADER_LEN + transport_len)
        .map_err(|_| Error::Malformed("packet too long for UDP"))?;
    let total_len = u16::try_from(MIN_HEADER_LEN + usize::from(udp_len))
        .map_err(|_| Error::Malformed("packet too long for IPv4"))?;
    let len = usize::from(total_len);
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    let (ip, rest) = out.split_at_mut(MIN_HEADER_LEN);
    let (udp, transport) = rest.split_at_mut(UDP_HEADER_LEN);

    let (source, destination) = (addrs.0.octets(), addrs.1.octets());
    // Version 4, IHL 5; DSCP/ECN 0; DF; no options.
    const FLAGS_DF: u16 = 0x4000;
    let ttl_protocol = u16::from_be_bytes([DEFAULT_TTL, PROTOCOL_UDP]);
    let words = |a: [u8; 4]| {
        u64::from(u16::from_be_bytes([a[0], a[1]])) + u64::from(u16::from_be_bytes([a[2], a[3]]))
    };
    let sum = 0x4500
        + u64::from(total_len)
        + u64::from(ip_id)
        + u64::from(FLAGS_DF)
        + u64::from(ttl_protocol)
        + words(source)
        + words(destination);
    let header_checksum = !checksum::fold(sum);
    let [t0, t1] = total_len.to_be_bytes();
    let [i0, i1] = ip_id.to_be_bytes();
    let [f0, f1] = FLAGS_DF.to_be_bytes();
    let [c0, c1] = header_checksum.to_be_bytes();
    let [s0, s1, s2, s3] = source;
    let [d0, d1, d2, d3] = destination;
    ip.copy_from_slice(&[
        0x45,
        0,
        t0,
        t1,
        i0,
        i1,
        f0,
        f1,
        DEFAULT_TTL,
        PROTOCOL_UDP,
        c0,
        c1,
        s0,
        s1,
        s2,
        s3,
        d0,
        d1,
        d2,
        d3,
    ]);

    // UDP checksum 0, as rxe sends.
    let [p0, p1] = src_port.to_be_bytes();
    let [r0, r1] = ROCEV2_UDP_PORT.to_be_bytes();
    let [l0, l1] = udp_len.to_be_bytes();
    udp.copy_from_slice(&[p0, p1, r0, r1, l0, l1, 0, 0]);

    match payload {
        Payload::Copied => roce.emit_checked(info, transport),
        Payload::InPlace(len) => roce.emit_around_payload(info, transport, len),
    }
    write_icrc(ip, udp, transport)?;
    Ok(len)
}

/// The IPv6 frame of [`emit_around_payload`]: what [`FrameRepr::ipv6`]
/// writes.
fn emit_ipv6_around(
    addrs: (Ipv6Addr, Ipv6Addr),
    src_port: u16,
    roce: &roce::Repr<'_>,
    payload_len: usize,
    buf: &mut [u8],
) -> Result<usize> {
    let info = roce.check_with_payload_len(payload_len)?;
    let transport_len = info.length + payload_len + usize::from(roce.bth.pad_count) + ICRC_LEN;
    let udp_len = u16::try_from(UDP_HEADER_LEN + transport_len)
        .map_err(|_| Error::Malformed("packet too long for UDP"))?;
    let ip_repr = ipv6::Repr::udp(addrs.0, addrs.1, usize::from(udp_len))
        .ok_or(Error::Malformed("packet too long for IPv6"))?;
    let len = ipv6::HEADER_LEN + usize::from(udp_len);
    let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
    let (ip, rest) = out.split_at_mut(ipv6::HEADER_LEN);
    let (udp, transport) = rest.split_at_mut(UDP_HEADER_LEN);
    ip_repr.emit(&mut ipv6::Packet::new_unchecked(&mut *ip));
    super::udp_header(src_port, udp_len).emit(&mut udp::Packet::new_unchecked(&mut *udp));
    roce.emit_around_payload(info, transport, payload_len);
    write_icrc(ip, udp, transport)?;
    Ok(len)
}

/// Computes the ICRC of a frame whose headers and payload are written and
/// writes it into the transport packet's last four bytes.
fn write_icrc(ip: &[u8], udp: &[u8], transport: &mut [u8]) -> Result<()> {
    let covered = transport.len() - ICRC_LEN;
    let crc = icrc::compute(ip, udp, &transport[..covered])
        .ok_or(Error::Malformed("IP header unfit for the ICRC"))?;
    icrc::write(&mut transport[covered..], crc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameRepr;
    use crate::roce::{ExtHeaders, Repr};
    use crate::{aeth, bth, deth, immdt, reth, Opcode, Psn, Qkey, Qpn, Rkey};

    fn reprs(payload: &[u8]) -> Vec<Repr<'_>> {
        let len = payload.len();
        let mut out = Vec::new();
        let send = bth::Repr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(0xabcdef), len);
        out.push(Repr { bth: send, ext: ExtHeaders::default(), payload });
        let mut imm =
            bth::Repr::new(Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, Qpn::new(3), Psn::new(1), len);
        imm.ack_req = true;
        imm.solicited = true;
        let ext =
            ExtHeaders { immdt: Some(immdt::Repr { imm: 0x0102_0304 }), ..Default::default() };
        out.push(Repr { bth: imm, ext, payload });
        let write = bth::Repr::new(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(9), Psn::new(5), len);
        let reth = Some(reth::Repr { va: 0x1234_5678_9abc, rkey: Rkey(77), dma_len: len as u32 });
        out.push(Repr { bth: write, ext: ExtHeaders { reth, ..Default::default() }, payload });
        let ud = bth::Repr::new(Opcode::UD_SEND_ONLY, Qpn::new(0x22), Psn::new(7), len);
        let deth = Some(deth::Repr { qkey: Qkey(0x1111), resv8: 0, src_qpn: Qpn::new(0x33) });
        out.push(Repr { bth: ud, ext: ExtHeaders { deth, ..Default::default() }, payload });
        // The shapes of a multi-packet message and of READ responses
        // (what the requester and the READ responder build in place).
        let first = bth::Repr::new(Opcode::RC_RDMA_WRITE_FIRST, Qpn::new(5), Psn::new(9), len);
        out.push(Repr { bth: first, ext: ExtHeaders { reth, ..Default::default() }, payload });
        let middle = bth::Repr::new(Opcode::RC_SEND_MIDDLE, Qpn::new(6), Psn::new(10), len);
        out.push(Repr { bth: middle, ext: ExtHeaders::default(), payload });
        let ok = Some(aeth::Repr { syndrome: aeth::Syndrome::from_u8(0x1f), msn: 0x7 });
        for (opcode, aeth) in [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, ok),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, None),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, ok),
        ] {
            let bth = bth::Repr::new(opcode, Qpn::new(7), Psn::new(11), len);
            out.push(Repr { bth, ext: ExtHeaders { aeth, ..Default::default() }, payload });
        }
        let atomic_write = bth::Repr::new(Opcode::RC_ATOMIC_WRITE, Qpn::new(8), Psn::new(12), len);
        out.push(Repr {
            bth: atomic_write,
            ext: ExtHeaders { reth, ..Default::default() },
            payload,
        });
        if payload.is_empty() {
            let ack = bth::Repr::new(Opcode::RC_ACKNOWLEDGE, Qpn::new(4), Psn::new(0xffffff), 0);
            let aeth = Some(aeth::Repr { syndrome: aeth::Syndrome::from_u8(0x1f), msn: 0x10203 });
            out.push(Repr { bth: ack, ext: ExtHeaders { aeth, ..Default::default() }, payload });
        }
        out
    }

    #[test]
    fn writes_what_the_frame_repr_writes() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        let addrs = [
            (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)),
            (Ipv4Addr::new(255, 255, 255, 255), Ipv4Addr::new(192, 168, 200, 17)),
            (Ipv4Addr::new(0, 0, 0, 0), Ipv4Addr::new(0, 0, 0, 0)),
        ];
        for len in (0..70).chain([255, 256, 1024, 4096]) {
            for repr in reprs(&bytes[..len]) {
                for (i, &pair) in addrs.iter().enumerate() {
                    let (ip_id, sport) = ([0u16, 0xffff, 0x1234][i], [0xc000u16, 1, 0xffff][i]);
                    let mut expected = vec![0xa5u8; 4200];
                    let n = FrameRepr::ipv4(pair, ip_id, sport, repr)
                        .unwrap()
                        .emit(&mut expected)
                        .unwrap();
                    let mut got = vec![0x5au8; 4200];
                    assert_eq!(emit_ipv4(pair, ip_id, sport, &repr, &mut got), Ok(n));
                    assert_eq!(got[..n], expected[..n], "len {len} {repr:?}");
                }
            }
        }
    }

    #[test]
    fn writes_around_a_payload_in_place_what_the_frame_repr_writes() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 13 + 5) as u8).collect();
        let v4 = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let v6 = (Ipv6Addr::LOCALHOST, Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4));
        for len in (0..70).chain([255, 256, 1024, 4096]) {
            for repr in reprs(&bytes[..len]) {
                let (ip_id, sport) = (0x1234, 0xc001);
                for v6_pair in [false, true] {
                    let (addrs, frame) = if v6_pair {
                        let frame = FrameRepr::ipv6(v6, sport, repr).unwrap();
                        ((IpAddr::V6(v6.0), IpAddr::V6(v6.1)), frame)
                    } else {
                        let frame = FrameRepr::ipv4(v4, ip_id, sport, repr).unwrap();
                        ((IpAddr::V4(v4.0), IpAddr::V4(v4.1)), frame)
                    };
                    let mut expected = vec![0xa5u8; 4300];
                    let n = frame.emit(&mut expected).unwrap();
                    // Only the payload is in the buffer; the rest is noise.
                    let mut got = vec![0x5au8; 4300];
                    let at = payload_offset(addrs.0, repr.bth.opcode).unwrap();
                    got[at..at + len].copy_from_slice(&bytes[..len]);
                    let headers = Repr { payload: &[], ..repr };
                    let written = emit_around_payload(addrs, ip_id, sport, &headers, len, &mut got);
                    assert_eq!(written, Ok(n), "len {len} {repr:?}");
                    assert_eq!(got[..n], expected[..n], "len {len} {repr:?} v6 {v6_pair}");
                    assert!(got[n..].iter().all(|&b| b == 0x5a), "nothing written past the frame");
                }
            }
        }
    }

    #[test]
    fn refuses_a_payload_given_twice_mixed_addresses_and_short_buffers() {
        let payload = [7u8; 16];
        let repr = reprs(&payload)[0];
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let mut buf = vec![0u8; 200];
        assert!(emit_around_payload((v4, v4), 1, 2, &repr, 16, &mut buf).is_err());
        let headers = Repr { payload: &[], ..repr };
        assert!(emit_around_payload((v4, v6), 1, 2, &headers, 16, &mut buf).is_err());
        assert_eq!(
            emit_around_payload((v6, v6), 1, 2, &headers, 16, &mut buf[..59]),
            Err(Error::Truncated)
        );
        assert_eq!(
            emit_around_payload((v4, v4), 1, 2, &headers, 16, &mut buf[..59]),
            Err(Error::Truncated)
        );
        // One byte short of the IPv6 frame (40 + 8 + 12 + 16 + 4).
        assert_eq!(
            emit_around_payload((v6, v6), 1, 2, &headers, 16, &mut buf[..79]),
            Err(Error::Truncated)
        );
        assert_eq!(emit_around_payload((v6, v6), 1, 2, &headers, 16, &mut buf[..80]), Ok(80));
        // A length no datagram has is refused, not added up.
        for huge in [usize::MAX, usize::MAX - 3, 70_000] {
            assert!(emit_around_payload((v4, v4), 1, 2, &headers, huge, &mut buf).is_err());
            assert!(emit_around_payload((v6, v6), 1, 2, &headers, huge, &mut buf).is_err());
        }
        // A payload on an opcode that carries none.
        let ack = reprs(&[]).pop().unwrap();
        assert!(emit_around_payload((v4, v4), 1, 2, &ack, 4, &mut buf).is_err());
        assert_eq!(payload_offset(v4, Opcode(0xff)), None);
    }

    #[test]
    fn refuses_what_the_frame_repr_refuses() {
        let addrs = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let payload = [0u8; 16];
        let repr = reprs(&payload)[0];
        // A buffer too short.
        assert_eq!(emit_ipv4(addrs, 1, 2, &repr, &mut [0u8; 40]), Err(Error::Truncated));
        // Headers that disagree with the opcode.
        let mut bad = repr;
        bad.ext.reth = Some(reth::Repr { va: 0, rkey: Rkey(0), dma_len: 0 });
        let expected = FrameRepr::ipv4(addrs, 1, 2, bad).map(|_| 0).unwrap_err();
        assert_eq!(emit_ipv4(addrs, 1, 2, &bad, &mut [0u8; 100]), Err(expected));
        // Too long for IPv4 (fits UDP).
        let big = vec![0u8; 65_500];
        let long = reprs(&big)[0];
        let expected = FrameRepr::ipv4(addrs, 1, 2, long).map(|_| 0).unwrap_err();
        assert_eq!(emit_ipv4(addrs, 1, 2, &long, &mut vec![0u8; 70_000]), Err(expected));
    }
}
