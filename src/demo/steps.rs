//! The demo's fourteen steps, in the order they run.

use super::ops::*;
use super::*;

pub(super) fn rc_send(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 10 * 1024;
    let data = pattern(len, 1);
    write(&p.ma, 0, &data)?;
    say!(out, "    setup RC QPs A {} ↔ B {}, both RTS, first PSN 0", qa.qpn(), qb.qpn());
    let before = p.snap();
    post_recv(&qb, &[recv_wr(1, &p.mb, 0, 16 * 1024)])?;

    post_send(&qa, &[send_wr(1, WrOpcode::Send, &p.ma, 0, len as u32)])?;
    say!(
        out,
        "    post  B: RECV wr_id 1, 16 KiB buffer;  A: SEND wr_id 1, {len} B = 10 packets of 1024"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    if at_b[0].byte_len as usize != len {
        return Err(format!("B: byte_len {} instead of {len}", at_b[0].byte_len));
    }
    check(out, "B's receive buffer", &read(&p.mb, 0, len)?, &data)?;
    Ok(format!("{len} B in 10 packets, one ACK"))
}

pub(super) fn send_imm(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let data = pattern(64, 2);
    write(&p.ma, 16384, &data)?;
    let imm = 0x1234_5678;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(2, &p.mb, 16384, 1024)])?;
    let mut wr = send_wr(2, WrOpcode::SendWithImm, &p.ma, 16384, 64);
    wr.imm_or_inv = imm;
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  B: RECV wr_id 2, 1024 B;  A: SEND_WITH_IMM wr_id 2, 64 B, imm 0x{imm:08x}"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    if !at_b[0].flags.contains(WcFlags::WITH_IMM) || at_b[0].imm_or_inv != imm {
        return Err(format!("B: immediate 0x{:08x} instead of 0x{imm:08x}", at_b[0].imm_or_inv));
    }
    check(out, "B's receive buffer", &read(&p.mb, 16384, 64)?, &data)?;
    Ok(format!("imm 0x{imm:08x} delivered"))
}

pub(super) fn rdma_write(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 4096;
    let data = pattern(len, 3);
    write(&p.ma, 20480, &data)?;
    let before = p.snap();
    let target = p.mb.addr() + 20480;
    let wr = rdma_wr(3, WrOpcode::RdmaWrite, (&p.ma, 20480, len as u32), (target, p.mb.rkey()));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  A: RDMA_WRITE wr_id 3, {len} B to B's va 0x{target:x} rkey {} (no receive used)",
        p.mb.rkey()
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite)])?;
    check(out, "B's memory", &read(&p.mb, 20480, len)?, &data)?;
    Ok(format!("{len} B written in 4 packets"))
}

pub(super) fn write_imm(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 2048;
    let data = pattern(len, 4);
    write(&p.ma, 24576, &data)?;
    let imm = 0xcafe_0001;
    let before = p.snap();
    post_recv(&qb, &[RecvWr { wr_id: 4, sg_list: Vec::new() }])?;
    let target = p.mb.addr() + 24576;
    let mut wr =
        rdma_wr(4, WrOpcode::RdmaWriteWithImm, (&p.ma, 24576, len as u32), (target, p.mb.rkey()));
    wr.imm_or_inv = imm;
    post_send(&qa, &[wr])?;
    say!(out, "    post  B: RECV wr_id 4 (no buffer: the immediate consumes a receive)");
    say!(
        out,
        "          A: RDMA_WRITE_WITH_IMM wr_id 4, {len} B to va 0x{target:x}, imm 0x{imm:08x}"
    );
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::RecvRdmaWithImm)])?;
    if at_b[0].imm_or_inv != imm {
        return Err(format!("B: immediate 0x{:08x} instead of 0x{imm:08x}", at_b[0].imm_or_inv));
    }
    check(out, "B's memory", &read(&p.mb, 24576, len)?, &data)?;
    Ok("data and immediate delivered".into())
}

pub(super) fn rdma_read(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 8192;
    let data = pattern(len, 5);
    write(&p.mb, 32768, &data)?;
    let before = p.snap();
    let source = p.mb.addr() + 32768;
    let wr = rdma_wr(5, WrOpcode::RdmaRead, (&p.ma, 32768, len as u32), (source, p.mb.rkey()));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    post  A: RDMA_READ wr_id 5, {len} B from B's va 0x{source:x} rkey {}",
        p.mb.rkey()
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaRead)])?;
    check(out, "A's buffer", &read(&p.ma, 32768, len)?, &data)?;
    Ok(format!("{len} B in 8 response packets"))
}

/// The 8-byte word at `offset` of `mr` (native order, as the HCA's atomics
/// see it).
pub(super) fn word(mr: &Mr, offset: u64) -> Result<u64, String> {
    let bytes = read(mr, offset, 8)?;
    Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| "short read")?))
}

pub(super) fn atomic(
    p: &mut Phase,
    out: &mut dyn Write,
    opcode: WrOpcode,
    initial: u64,
    operands: (u64, u64),
    expected_after: u64,
) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let (at_b_off, at_a_off) = (49152, 49152 + opcode as u64 * 8);
    write(&p.mb, at_b_off, &initial.to_ne_bytes())?;
    write(&p.ma, at_a_off, &[0xee; 8])?;
    let before = p.snap();
    let target = p.mb.addr() + at_b_off;
    let wr_id = 6 + u64::from(opcode == WrOpcode::AtomicFetchAndAdd);
    let mut wr = rdma_wr(wr_id, opcode, (&p.ma, at_a_off, 8), (target, p.mb.rkey()));
    wr.compare_add = operands.0;
    wr.swap = operands.1;
    post_send(&qa, &[wr])?;
    let ops = match opcode {
        WrOpcode::AtomicCmpAndSwp => {
            format!("compare 0x{:x}, swap 0x{:x}", operands.0, operands.1)
        }
        _ => format!("add 0x{:x}", operands.0),
    };
    say!(
        out,
        "    post  A: {} wr_id {wr_id} on B's u64 at va 0x{target:x} (holds 0x{initial:x}), {ops}",
        wr_name(opcode)
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    let completion = if opcode == WrOpcode::AtomicCmpAndSwp { Wc::CompSwap } else { Wc::FetchAdd };
    expect("A", &at_a, &[(WcStatus::Success, completion)])?;
    let orig = read(&p.ma, at_a_off, 8)?;
    let now = word(&p.mb, at_b_off)?.to_ne_bytes();
    checks(
        out,
        &[
            ("original value returned to A", &orig, &initial.to_le_bytes()),
            ("B's word after the operation", &now, &expected_after.to_ne_bytes()),
        ],
    )?;
    Ok(format!("0x{initial:x} → 0x{expected_after:x}"))
}

pub(super) fn compare_swap(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let (old, new) = (0x1111, 0x2222);
    atomic(p, out, WrOpcode::AtomicCmpAndSwp, old, (old, new), new)
}

pub(super) fn fetch_add(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let old = 0x2222u64;
    atomic(p, out, WrOpcode::AtomicFetchAndAdd, old, (5, 0), old + 5)
}

pub(super) fn uc_send_write(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Uc, &t, &t)?;
    let (send_len, write_len) = (3000usize, 2048usize);
    let send_data = pattern(send_len, 8);
    let write_data = pattern(write_len, 9);
    write(&p.ma, 57344, &send_data)?;
    write(&p.ma, 61440, &write_data)?;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(8, &p.mb, 57344, 4096)])?;
    let target = p.mb.addr() + 61440;
    let wrs = [
        send_wr(8, WrOpcode::Send, &p.ma, 57344, send_len as u32),
        rdma_wr(9, WrOpcode::RdmaWrite, (&p.ma, 61440, write_len as u32), (target, p.mb.rkey())),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup UC QPs A {} → B {}: no ACKs; a sender completes once it has sent",
        qa.qpn(),
        qb.qpn()
    );
    say!(
        out,
        "    post  B: RECV wr_id 8;  A: SEND {send_len} B + RDMA_WRITE {write_len} B (wr_id 8, 9)"
    );
    let (at_b, at_a) = wait_both(p, 1, 2);
    let written = wait_for_bytes(&p.mb, 61440, &write_data)?;
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send), (WcStatus::Success, Wc::RdmaWrite)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    checks(
        out,
        &[
            ("B's receive buffer (SEND)", &read(&p.mb, 57344, send_len)?, &send_data),
            ("B's memory (WRITE)", &written, &write_data),
        ],
    )?;
    Ok("no ACKs on UC".into())
}

pub(super) fn ud_send(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let qkey = 0x1111_2222;
    let qa = p.a.qp(QpType::Ud, cap())?;
    let qb = p.b.qp(QpType::Ud, cap())?;
    bring_up(&qa, None, &t, qkey)?;
    bring_up(&qb, None, &t, qkey)?;
    let attr =
        AhAttr { dgid: p.b.gid(), sgid_index: 1, hop_limit: 64, port_num: 1, ..AhAttr::default() };
    let ah = p.a.pd.create_ah(attr).map_err(|e| format!("create_ah: {e}"))?;
    let len = 512;
    let data = pattern(len, 10);
    write(&p.ma, 65536, &data)?;
    write(&p.mb, 65536, &[0xee; 40])?;
    let before = p.snap();
    post_recv(&qb, &[recv_wr(10, &p.mb, 65536, 40 + 1024)])?;
    let mut wr = send_wr(10, WrOpcode::Send, &p.ma, 65536, len as u32);
    wr.ud = Some((ah.index(), qb.qpn(), Qkey(qkey)));
    post_send(&qa, &[wr])?;
    say!(
        out,
        "    setup UD QPs A {} and B {}, Q_Key 0x{qkey:08x}; A's AH {} → GID {}",
        qa.qpn(),
        qb.qpn(),
        ah.index(),
        p.b.gid()
    );
    say!(out, "    post  B: RECV wr_id 10, 40 + 1024 B;  A: SEND wr_id 10, {len} B via the AH");
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    let wc = &at_b[0];
    if !wc.flags.contains(WcFlags::GRH) || wc.byte_len as usize != 40 + len || wc.src_qp != qa.qpn()
    {
        return Err(format!(
            "B: {} (expected GRH, byte_len {}, src_qp {})",
            describe_wc(wc),
            40 + len,
            qa.qpn()
        ));
    }
    let grh = read(&p.mb, 65536, 40)?;
    let (ip, src) = match p.a.addr() {
        IpAddr::V4(_) => {
            (&grh[20..40], IpAddr::from(<[u8; 4]>::try_from(&grh[32..36]).unwrap_or_default()))
        }
        IpAddr::V6(_) => {
            (&grh[..], IpAddr::from(<[u8; 16]>::try_from(&grh[8..24]).unwrap_or_default()))
        }
    };
    let hex: Vec<String> = ip.iter().map(|b| format!("{b:02x}")).collect();
    say!(
        out,
        "    GRH   the first 40 B of B's buffer: {} the IP header:",
        if grh[..20] == [0; 20] && p.a.addr().is_ipv4() { "20 zero bytes, then" } else { "" }
    );
    say!(out, "          {}  (src {src})", hex.join(" "));
    if src != p.a.addr() {
        return Err(format!("GRH source {src} instead of {}", p.a.addr()));
    }
    check(out, "B's buffer after the GRH", &read(&p.mb, 65536 + 40, len)?, &data)?;
    Ok("GRH + 512 B".into())
}

pub(super) fn srq_receive(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let srq = p.b.pd.create_srq(16, 1, 0).map_err(|e| format!("create_srq: {e}"))?;
    let qa = p.a.qp(QpType::Rc, cap())?;
    let qb =
        p.b.pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &p.b.cq,
                recv_cq: &p.b.cq,
                srq: Some(&srq),
                cap: cap(),
                sq_sig_all: false,
            })
            .map_err(|e| format!("create_qp: {e}"))?;
    p.connect(&qa, &qb, &t, &t)?;
    let lens = [300usize, 700];
    let first = pattern(lens[0], 11);
    let second = pattern(lens[1], 12);
    write(&p.ma, 73728, &first)?;
    write(&p.ma, 77824, &second)?;
    let before = p.snap();
    let recvs = [recv_wr(101, &p.mb, 73728, 1024), recv_wr(102, &p.mb, 77824, 1024)];
    srq.post_recv(&recvs).map_err(|(i, e)| format!("post_srq_recv (WR {i}): {e}"))?;
    let wrs = [
        send_wr(11, WrOpcode::Send, &p.ma, 73728, lens[0] as u32),
        send_wr(12, WrOpcode::Send, &p.ma, 77824, lens[1] as u32),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup B's QP {} takes its receives from an SRQ (no receive queue of its own)",
        qb.qpn()
    );
    say!(
        out,
        "    post  B: 2 RECVs to the SRQ (wr_id 101, 102);  A: 2 SENDs, {} B and {} B",
        lens[0],
        lens[1]
    );
    let (at_b, at_a) = wait_both(p, 2, 2);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send), (WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv), (WcStatus::Success, Wc::Recv)])?;
    let ids: Vec<u64> = at_b.iter().map(|c| c.wr_id).collect();
    if ids != [101, 102] || at_b.iter().any(|c| c.qp_num != qb.qpn()) {
        return Err(format!("B: completions {ids:?} on the wrong WRs or QP"));
    }
    checks(
        out,
        &[
            ("first SRQ buffer", &read(&p.mb, 73728, lens[0])?, &first),
            ("second SRQ buffer", &read(&p.mb, 77824, lens[1])?, &second),
        ],
    )?;
    Ok("SRQ WRs 101, 102 consumed in order".into())
}

pub(super) fn memory_window(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, qb) = p.pair(QpType::Rc, &t, &t)?;
    let mw = p.b.pd.alloc_mw(2).map_err(|e| format!("alloc_mw: {e}"))?;
    let (base, len) = (98304u64, 4096u64);
    let access = Access::REMOTE_WRITE | Access::REMOTE_READ;
    let before = p.snap();
    let (bind, rkey) = SendWr::bind_mw(13, &mw, &p.mb, base, len, access, 0x42);
    post_send(&qb, &[bind])?;
    say!(
        out,
        "    post  B: BIND_MW wr_id 13: type-2 MW on bytes {base}..{}, READ|WRITE → rkey {rkey}",
        base + len
    );
    let bound = wait(&p.b, 1);
    expect("B", &bound, &[(WcStatus::Success, Wc::BindMw)])?;
    mw.set_rkey(rkey);
    let data = pattern(1024, 13);
    write(&p.ma, 98304, &data)?;
    let target = p.mb.addr() + base + 512;
    let wrs = [
        rdma_wr(14, WrOpcode::RdmaWrite, (&p.ma, 98304, 1024), (target, rkey)),
        rdma_wr(15, WrOpcode::RdmaRead, (&p.ma, 102400, 1024), (target, rkey)),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    post  A: RDMA_WRITE (wr_id 14), RDMA_READ (15), 1 KiB each, 0x{target:x} rkey {rkey}"
    );
    let at_a = wait(&p.a, 2);
    p.report(out, &before, &at_a, &bound);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite), (WcStatus::Success, Wc::RdmaRead)])?;
    checks(
        out,
        &[
            ("B's memory through the window", &read(&p.mb, base + 512, 1024)?, &data),
            ("A's READ back through the window", &read(&p.ma, 102400, 1024)?, &data),
        ],
    )?;
    Ok(format!("window rkey {rkey}"))
}

pub(super) fn rnr(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let ta = default_tuning();
    // B's RNR NAKs ask A to wait timer code 16: 2.56 ms.
    let tb = Tuning { min_rnr_timer: 16, ..default_tuning() };
    let (qa, qb) = p.pair(QpType::Rc, &ta, &tb)?;
    let len = 256;
    let data = pattern(len, 14);
    write(&p.ma, 106496, &data)?;
    let before = p.snap();
    post_send(&qa, &[send_wr(16, WrOpcode::Send, &p.ma, 106496, len as u32)])?;
    say!(
        out,
        "    post  A: SEND wr_id 16, {len} B; B has no receive posted (rnr_retry 7: forever)"
    );
    let deadline = Instant::now() + WAIT;
    let naks = || {
        let now = p.b.dev.hca().lock().counters().send_rnr_err;
        now.saturating_sub(before.b.send_rnr_err)
    };
    while naks() == 0 && Instant::now() < deadline {
        p.a.dev.progress();
        p.b.dev.progress();
        std::thread::sleep(Duration::from_micros(100));
    }
    if naks() == 0 {
        return Err("B sent no RNR NAK".into());
    }
    say!(out, "    ...   B answered with an RNR NAK (receiver not ready); now B posts the receive");
    post_recv(&qb, &[recv_wr(16, &p.mb, 106496, 1024)])?;
    say!(out, "    post  B: RECV wr_id 16, 1024 B; A retries after the RNR timer");
    let (at_b, at_a) = wait_both(p, 1, 1);
    p.report(out, &before, &at_a, &at_b);
    expect("A", &at_a, &[(WcStatus::Success, Wc::Send)])?;
    expect("B", &at_b, &[(WcStatus::Success, Wc::Recv)])?;
    let after = p.snap();
    let received = after.a.rcvd_rnr_err.saturating_sub(before.a.rcvd_rnr_err);
    if received == 0 {
        return Err("A counted no RNR NAK (rcvd_rnr_err)".into());
    }
    check(out, "B's receive buffer", &read(&p.mb, 106496, len)?, &data)?;
    Ok(format!("{received} RNR NAK, then success"))
}

pub(super) fn bad_rkey(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    let t = default_tuning();
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let good = p.mb.rkey().0;
    let bad = Rkey((good & !0xff) | u32::from((good as u8).wrapping_add(0x55)));
    let len = 64;
    write(&p.ma, 110592, &pattern(len, 15))?;
    let untouched = read(&p.mb, 110592, len)?;
    let before = p.snap();
    let target = p.mb.addr() + 110592;
    post_send(
        &qa,
        &[rdma_wr(17, WrOpcode::RdmaWrite, (&p.ma, 110592, len as u32), (target, bad))],
    )?;
    say!(
        out,
        "    post  A: RDMA_WRITE wr_id 17, {len} B to B with rkey {bad} (B's MR has {good:#010x})"
    );
    let at_a = wait(&p.a, 1);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::RemAccessErr, Wc::RdmaWrite)])?;
    let state = match qa.query().ok().and_then(|a| a.qp_state) {
        Some(state) => upper_snake(&format!("{state:?}")),
        None => "unknown".into(),
    };
    say!(out, "    state A's QP is now in {state}: an error completion ends an RC connection");
    check(out, "B's memory left untouched", &read(&p.mb, 110592, len)?, &untouched)?;
    Ok("REM_ACCESS_ERR, nothing written".into())
}

pub(super) fn fault_run(p: &mut Phase, out: &mut dyn Write) -> Result<String, String> {
    // A shorter ACK timeout (code 12: 16.8 ms) keeps a lost last packet cheap.
    let t = Tuning { timeout: 12, ..default_tuning() };
    let (qa, _qb) = p.pair(QpType::Rc, &t, &t)?;
    let len = 16 * 1024;
    let data = pattern(len, 16);
    write(&p.ma, 131072, &data)?;
    let before = p.snap();
    let target = p.mb.addr() + 131072;
    let wrs = [
        rdma_wr(18, WrOpcode::RdmaWrite, (&p.ma, 131072, len as u32), (target, p.mb.rkey())),
        rdma_wr(19, WrOpcode::RdmaRead, (&p.ma, 131072 + 65536, len as u32), (target, p.mb.rkey())),
    ];
    post_send(&qa, &wrs)?;
    say!(
        out,
        "    setup RC QPs A {} ↔ B {} on the reopened devices; ACK timeout 16.8 ms",
        qa.qpn(),
        _qb.qpn()
    );
    say!(out, "    post  A: RDMA_WRITE wr_id 18, {len} B (16 packets), RDMA_READ wr_id 19 back");
    let at_a = wait(&p.a, 2);
    p.report(out, &before, &at_a, &[]);
    expect("A", &at_a, &[(WcStatus::Success, Wc::RdmaWrite), (WcStatus::Success, Wc::RdmaRead)])?;
    say!(
        out,
        "    why   a lost packet leaves a PSN gap: B NAKs the first missing PSN (sequence error)"
    );
    say!(out, "          and A goes back to it and resends from there (go-back-N)");
    let after = p.snap();
    let lost = after.sa.faults_lost.saturating_sub(before.sa.faults_lost);
    let retries = after.a.completer_retry_err.saturating_sub(before.a.completer_retry_err);
    checks(
        out,
        &[
            ("B's memory", &read(&p.mb, 131072, len)?, &data),
            ("A's READ back", &read(&p.ma, 131072 + 65536, len)?, &data),
        ],
    )?;
    if lost > 0 && retries == 0 {
        return Err("packets were lost but A never retransmitted".into());
    }
    Ok(format!("{lost} lost, {retries} go-back(s), data intact"))
}
