//! The sending path's frame: an IPv4 RoCEv2 packet written straight into
//! the packet buffer, byte for byte what [`FrameRepr::ipv4`] and
//! [`FrameRepr::emit`] write, without building the frame representation
//! (an IP header repr with room for options, a UDP repr, a copy of the
//! transport repr) and without checking the transport repr twice.

#[cfg(doc)]
use super::FrameRepr;
use super::UDP_HEADER_LEN;
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{DEFAULT_TTL, MIN_HEADER_LEN, PROTOCOL_UDP};
use crate::{checksum, roce, Error, Result, ROCEV2_UDP_PORT};
use core::net::Ipv4Addr;

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
    // What `udp_len_for` and `roce.buffer_len` give, from one check.
    let info = roce.check()?;
    let transport_len =
        info.length + roce.payload.len() + usize::from(roce.bth.pad_count) + ICRC_LEN;
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

    roce.emit_checked(info, transport);
    let covered = transport.len() - ICRC_LEN;
    let crc = icrc::compute(ip, udp, &transport[..covered])
        .ok_or(Error::Malformed("IP header unfit for the ICRC"))?;
    icrc::write(&mut transport[covered..], crc);
    Ok(len)
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
