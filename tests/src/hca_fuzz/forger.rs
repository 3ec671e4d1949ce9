//! The packet forger of [`hca_packets`](super::hca_packets): RoCEv2 frames
//! from the input, aimed at what the device holds.

use super::*;

impl Packets {
    /// A RoCEv2 frame to the device, its fields from the input but aimed at
    /// what the device holds: a live QP, the PSN it expects, the regions
    /// and keys it has registered.
    pub(super) fn build_packet(&mut self, inp: &mut Input<'_>) -> Option<Vec<u8>> {
        let node = &self.node;
        let target = inp.below(node.qps.len() + 1);
        let q = node.qps.get(target);
        let dest_qpn = match q {
            Some(q) => q.qpn,
            None => Qpn::new(if inp.bool() { inp.u24() } else { 16 + inp.below(24) as u32 }),
        };
        let qp_type = q.map_or(QpType::Rc, |q| q.qp_type);
        let opcode = match inp.below(16) {
            0..=6 => match qp_type {
                QpType::Rc => inp.pick(&RC_REQUESTS),
                QpType::Uc => Opcode(0x20 + inp.below(12) as u8),
                QpType::Ud => inp.pick(&UD_REQUESTS),
            },
            7..=11 if qp_type == QpType::Rc => inp.pick(&RC_RESPONSES),
            7..=11 => inp.pick(&RC_REQUESTS),
            12..=14 => {
                let known: Vec<Opcode> = uroce_wire::opcode::known().map(|i| i.opcode).collect();
                inp.pick(&known)
            }
            _ => Opcode(inp.u8()),
        };
        // An opcode the table does not know goes out as SEND ONLY with the
        // opcode byte replaced afterwards.
        let (info, raw_opcode) = match opcode.info() {
            Some(info) => (info, None),
            None => (Opcode::RC_SEND_ONLY.info()?, Some(opcode.0)),
        };
        let QpView { epsn, comp_psn, next_psn, mtu, oldest } =
            self.view(dest_qpn).unwrap_or(QpView {
                epsn: Psn::new(0),
                comp_psn: Psn::new(0),
                next_psn: Psn::new(0),
                mtu: 1024,
                oldest: None,
            });
        let base = if info.is(Mask::RESP) { comp_psn } else { epsn };
        let psn = match inp.below(10) {
            0..=3 => base,
            4 => base.wrapping_add(u32::from(inp.u8() % 8)),
            5 => base.wrapping_sub(1 + u32::from(inp.u8() % 8)),
            6 => next_psn.wrapping_sub(1),
            7 => oldest.map_or(base, |(first, len, _)| {
                first.wrapping_add((len.div_ceil(u64::from(mtu)).max(1) - 1) as u32)
            }),
            8 => next_psn,
            _ => Psn::new(inp.u24()),
        };
        let payload_len = if !info.is(Mask::PAYLOAD) {
            0
        } else {
            let mtu = mtu as usize;
            match inp.below(10) {
                0..=2 => mtu,
                3 => 0,
                4 => usize::from(inp.u8()),
                5 => mtu.saturating_sub(1 + inp.below(8)),
                6 => mtu + 1 + inp.below(8),
                7 => 8,
                8 => oldest.map_or(mtu, |(first, len, _)| {
                    let offset = u64::from(first.distance_to(psn).max(0) as u32) * mtu as u64;
                    len.saturating_sub(offset).min(mtu as u64) as usize
                }),
                _ => inp.below(4200),
            }
        };
        let fill = inp.u8();
        let payload: Vec<u8> = (0..payload_len).map(|i| fill.wrapping_add(i as u8)).collect();
        let ext = self.ext_headers(inp, info.mask, payload_len, mtu, q);
        let mut bth = bth::Repr::new(info.opcode, dest_qpn, psn, payload_len);
        let flags = inp.u8();
        bth.ack_req = flags & 1 != 0;
        bth.solicited = flags & 2 != 0;
        if flags & 0x30 == 0x30 && info.is(Mask::PAYLOAD) {
            bth.pad_count = inp.u8() & 3;
        }
        if flags & 0xc0 == 0xc0 {
            let wild = inp.u16();
            bth.pkey = inp.pick(&[0x7fff, 0xffff, 0, wild]);
            bth.mig_req = inp.bool();
            bth.tver = inp.u8() & 0xf;
            bth.fecn = inp.bool();
            bth.becn = inp.bool();
            bth.resv6 = inp.u8() & 0x3f;
            bth.resv7 = inp.u8() & 0x7f;
        }
        let repr = Repr { bth, ext, payload: &payload };
        repr.check().ok()?;
        // Addresses: from whom this QP expects its packets, mostly.
        let source = match q.map(|q| q.peer) {
            Some(Peer::Connected { ip, .. }) => ip,
            _ => inp.pick(&[PEER_IP, node.ip]),
        };
        let sport = inp.u16();
        let ip_id = inp.u16();
        let v6 = qp_type == QpType::Ud && inp.one_in(4);
        let frame = match inp.below(24) {
            _ if v6 => {
                let src = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, inp.u16());
                FrameRepr::ipv6((src, node.ip6), sport, repr)
            }
            0 => FrameRepr::ipv4((Ipv4Addr::from(inp.u32()), node.ip), ip_id, sport, repr),
            1 => FrameRepr::ipv4((source, Ipv4Addr::from(inp.u32())), ip_id, sport, repr),
            2 => FrameRepr::ipv6((node.ip6, node.ip6), sport, repr),
            _ => FrameRepr::ipv4((source, node.ip), ip_id, sport, repr),
        }
        .ok()?;
        let mut buf = vec![0; frame.buffer_len()];
        let len = frame.emit(&mut buf).ok()?;
        buf.truncate(len);
        if let Some(op) = raw_opcode {
            let at = if buf[0] >> 4 == 4 { 28 } else { 48 };
            buf[at] = op;
            refresh_frame(&mut buf);
        }
        Some(buf)
    }

    /// The extension headers `mask` calls for, aimed at the device's
    /// regions and keys.
    pub(super) fn ext_headers(
        &self,
        inp: &mut Input<'_>,
        mask: Mask,
        payload_len: usize,
        mtu: u32,
        q: Option<&QpInfo>,
    ) -> ExtHeaders {
        let node = &self.node;
        let mut ext = ExtHeaders::default();
        if mask.contains(Mask::RDETH) {
            ext.rdeth = Some(rdeth::Repr { resv8: 0, eecn: inp.u24() });
        }
        if mask.contains(Mask::DETH) {
            let qkey = match inp.below(6) {
                0 => inp.u32(),
                1 => 0x8000_0000 | inp.u32(),
                _ => q.map_or(0, |q| q.qkey),
            };
            let src_qpn = inp.u24();
            ext.deth = Some(deth::Repr {
                qkey: Qkey(qkey),
                resv8: 0,
                src_qpn: uroce_wire::Qpn::new(src_qpn),
            });
        }
        if mask.contains(Mask::FETH) {
            let b = inp.u8();
            ext.feth = Some(feth::Repr {
                selectivity_level: b >> 4 & 3,
                placement_type: b & 0xf,
                reserved: 0,
            });
        }
        if mask.contains(Mask::RETH) {
            let aligned = mask.contains(Mask::ATOMIC_WRITE) && !inp.one_in(4);
            let (va, room, rkey) = node.pick_target(inp, aligned);
            let dma_len = match inp.below(8) {
                0 | 1 => payload_len as u64,
                2 => room,
                3 => payload_len as u64 * (2 + inp.below(4) as u64),
                4 => 0,
                5 => u64::from(inp.u32()),
                6 => u64::from(mtu) * (1 + inp.below(4) as u64) + inp.below(8) as u64,
                _ => 8,
            };
            ext.reth = Some(reth::Repr { va, rkey: Rkey(rkey), dma_len: dma_len as u32 });
        }
        if mask.contains(Mask::ATOMIC_ETH) {
            let aligned = !inp.one_in(6);
            let (va, _, rkey) = node.pick_target(inp, aligned);
            ext.atomic_eth = Some(atomic_eth::Repr {
                va,
                rkey: Rkey(rkey),
                swap_add: inp.u64(),
                compare: inp.u64(),
            });
        }
        if mask.contains(Mask::AETH) {
            let syndrome = match inp.below(10) {
                0..=2 => 0x1f,
                3 => inp.u8() & 0x1f,
                4 => 0x20 | (inp.u8() & 0x1f),
                5 | 6 => 0x60,
                7 => 0x60 | (inp.u8() % 5),
                _ => inp.u8(),
            };
            let msn = inp.u24();
            ext.aeth = Some(aeth::Repr { syndrome: aeth::Syndrome::from_u8(syndrome), msn });
        }
        if mask.contains(Mask::ATOMIC_ACK_ETH) {
            ext.atomic_ack_eth = Some(atomic_ack_eth::Repr { orig: inp.u64() });
        }
        if mask.contains(Mask::IMMDT) {
            ext.immdt = Some(immdt::Repr { imm: inp.u32() });
        }
        if mask.contains(Mask::IETH) {
            ext.ieth = Some(ieth::Repr { rkey: Rkey(node.pick_key(inp)) });
        }
        ext
    }
}
