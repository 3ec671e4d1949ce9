//! `uroce pingpong --srq`: `ibv_srq_pingpong`. `-q` RC QPs share one
//! shared receive queue; every QP ping-pongs `-n` messages, and each
//! receive may land on any QP.
//!
//! The out-of-band exchange is the C tool's, quirks included: each side
//! sends 256 address messages (`MAX_QP`), the ones beyond `-q` zeroed;
//! the client then writes `done\0`. The AH of every QP takes the GID of the
//! peer's first message, with hop limit 1.

use super::{
    address_line, bad_pages, c_tool_tuning, create_cq, inet_ntop6, mark_pages, open_channel,
    wait_cq_event, wc_status_str, Dest, Outcome, Plan, Transport, MSG_LEN, PINGPONG_RECV_WRID,
    PINGPONG_SEND_WRID,
};
use crate::oob::{self, OobListener, OobStream};
use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use uroce_net::udp::UdpDevice;
use uroce_verbs::connect::{self, Remote};
use uroce_verbs::{
    Access, CompChannel, Context, Cq, Gid, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, Qpn, RecvWr,
    SendFlags, SendWr, Srq, WcStatus, WrOpcode,
};

/// The C tool's `MAX_QP`: the number of address messages each way, and
/// the most QPs `-q` may ask for.
pub const MAX_QP: u32 = 256;
/// The C tool's default `-q`.
pub const DEFAULT_NUM_QP: u32 = 16;

/// The verbs objects (`struct pingpong_context`), dropped QPs first.
struct SrqSession {
    qps: Vec<Qp>,
    srq: Srq,
    mr: Mr,
    cq: Cq,
    channel: Option<CompChannel>,
    _pd: Pd,
    ctx: Context,
}

impl SrqSession {
    fn open(dev: &UdpDevice, plan: &Plan, num_qp: u32) -> Result<SrqSession, String> {
        let ctx = Context::open(dev.hca());
        let port = ctx.query_port().map_err(|e| format!("Couldn't get port info: {e}"))?;
        if plan.size > port.max_msg_sz {
            return Err(format!(
                "Requested size larger than the largest message ({})",
                port.max_msg_sz
            ));
        }
        let channel = plan.events.then(|| open_channel(&ctx)).transpose()?;
        let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        // The C tool's buffer is zeroed; so is a new MR's memory. With -c it
        // is filled as the other tools' (0x7b), so that the check at the
        // page starts (0) proves the peer's data arrived.
        let mr = pd
            .alloc_mr(u64::from(plan.size), Access::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        if plan.chk {
            mr.write(0, &vec![0x7b; plan.size as usize])
                .map_err(|e| format!("Couldn't fill the buffer: {e}"))?;
        }
        let cqe = plan.rx_depth.saturating_add(num_qp);
        let cq = create_cq(&ctx, cqe, channel.as_ref())?;
        let srq =
            pd.create_srq(plan.rx_depth, 1, 0).map_err(|e| format!("Couldn't create SRQ: {e}"))?;
        let mut qps = Vec::with_capacity(num_qp as usize);
        for i in 0..num_qp {
            let qp = pd
                .create_qp(&QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: Some(&srq),
                    cap: QpCap {
                        max_send_wr: 1,
                        max_recv_wr: 0,
                        max_send_sge: 1,
                        max_recv_sge: 0,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                })
                .map_err(|e| format!("Couldn't create QP[{i}]: {e}"))?;
            connect::to_init(&qp, Access(0), 0)
                .map_err(|e| format!("Failed to modify QP[{i}] to INIT: {e}"))?;
            qps.push(qp);
        }
        Ok(SrqSession { qps, srq, mr, cq, channel, _pd: pd, ctx })
    }

    /// `pp_post_recv`: up to `n` receives on the SRQ; returns how many.
    fn post_recv(&self, size: u32, n: u64) -> u64 {
        let wr = RecvWr { wr_id: PINGPONG_RECV_WRID, sg_list: vec![self.mr.sge(0, size)] };
        let mut posted = 0;
        while posted < n && self.srq.post_recv(std::slice::from_ref(&wr)).is_ok() {
            posted += 1;
        }
        posted
    }

    fn post_send(&self, index: usize, size: u32) -> Result<(), String> {
        let mut wr = SendWr::new(PINGPONG_SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        wr.sg_list = vec![self.mr.sge(0, size)];
        self.qps[index].post_send(&[wr]).map_err(|(_, e)| format!("Couldn't post send: {e}"))
    }

    /// `pp_connect_ctx`: every QP to RTR and RTS towards its peer QP, all
    /// with the GID of the peer's first message.
    fn connect(&self, plan: &Plan, mine: &[Dest], remote: &[Dest]) -> Result<(), String> {
        let gid = remote[0].gid;
        if gid.0[8..16].iter().all(|b| *b == 0) {
            return Err(format!(
                "Failed to modify QP[0] to RTR: the remote GID {} has no interface ID \
                 (run the other side with -g 1: RoCE needs a GID)",
                inet_ntop6(&gid)
            ));
        }
        for (i, qp) in self.qps.iter().enumerate() {
            let remote = Remote { gid, qpn: Qpn::new(remote[i].qpn), psn: remote[i].psn };
            connect::to_rts(qp, Some(remote), &c_tool_tuning(plan, mine[i].psn))
                .map_err(|e| format!("Failed to modify QP[{i}] to RTR/RTS: {e}"))?;
        }
        Ok(())
    }
}

fn write_dests(stream: &mut OobStream, dests: &[Dest]) -> Result<(), String> {
    let mut bytes = Vec::with_capacity(MSG_LEN * MAX_QP as usize);
    for i in 0..MAX_QP as usize {
        let dest =
            dests.get(i).copied().unwrap_or(Dest { lid: 0, qpn: 0, psn: 0, gid: Gid([0; 16]) });
        bytes.extend_from_slice(&dest.to_wire());
    }
    stream.write_all(&bytes).map_err(|e| super::io_error("Couldn't send local address", e))
}

fn read_dests(stream: &mut OobStream, num_qp: u32) -> Result<Vec<Dest>, String> {
    let mut dests = Vec::with_capacity(num_qp as usize);
    for i in 0..MAX_QP {
        let mut msg = [0u8; MSG_LEN];
        stream
            .read_exact(&mut msg)
            .map_err(|e| super::io_error(&format!("Couldn't read remote address [{i}]"), e))?;
        if i < num_qp {
            let dest = Dest::from_wire(&msg).ok_or_else(|| {
                format!(
                    "Couldn't read remote address [{i}]: malformed message {:?}",
                    String::from_utf8_lossy(&msg)
                )
            })?;
            dests.push(dest);
        }
    }
    Ok(dests)
}

/// The whole `--srq` run on an open device.
pub(super) fn run(
    plan: &Plan,
    num_qp: u32,
    dev: UdpDevice,
    out: &mut dyn Write,
) -> Result<Outcome, String> {
    if num_qp > plan.rx_depth {
        return Err(format!(
            "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
            plan.rx_depth
        ));
    }
    let session = SrqSession::open(&dev, plan, num_qp)?;
    let rx_depth = u64::from(plan.rx_depth);
    let mut routs = session.post_recv(plan.size, rx_depth);
    if routs < rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    if session.channel.is_some() {
        session.cq.req_notify(false);
    }
    let gid = session
        .ctx
        .query_gid(plan.gid_idx)
        .map_err(|e| format!("Could not get local gid for gid index {}: {e}", plan.gid_idx))?;
    let mine: Vec<Dest> = session
        .qps
        .iter()
        .map(|qp| Dest { lid: 0, qpn: qp.qpn().value(), psn: super::random_psn(), gid })
        .collect();
    let listener = match &plan.host {
        Some(_) => None,
        None => Some(OobListener::bind(&dev, plan.port)?),
    };
    for dest in &mine {
        let _ = writeln!(out, "{}", address_line("local", dest, Transport::Rc));
    }
    let _ = out.flush();
    let remote = match (&plan.host, &listener) {
        (Some(host), _) => {
            let mut stream = oob::connect(&dev, host, plan.port, plan.timeout)?;
            stream.set_timeout(Some(plan.timeout));
            write_dests(&mut stream, &mine)?;
            let remote = read_dests(&mut stream, num_qp)?;
            stream.write_all(super::DONE).map_err(|e| super::io_error("client write", e))?;
            remote
        }
        (None, Some(listener)) => {
            let deadline = Instant::now() + plan.accept_timeout;
            let mut stream = listener.accept(Some(deadline), &AtomicBool::new(false))?;
            stream.set_timeout(Some(plan.timeout));
            let remote = read_dests(&mut stream, num_qp)?;
            session
                .connect(plan, &mine, &remote)
                .map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
            write_dests(&mut stream, &mine)?;
            let mut done = [0u8; 5];
            stream.read_exact(&mut done).map_err(|e| super::io_error("client write", e))?;
            remote
        }
        (None, None) => return Err("the server has no listening socket".into()),
    };
    drop(listener);
    for dest in &remote {
        let _ = writeln!(out, "{}", address_line("remote", dest, Transport::Rc));
    }
    let _ = out.flush();
    let client = plan.host.is_some();
    if client {
        session.connect(plan, &mine, &remote)?;
    }

    let n = num_qp as usize;
    let mut pending = vec![PINGPONG_RECV_WRID; n];
    if client {
        if plan.chk {
            mark_pages(&session.mr, 0, plan.size)?;
        }
        for (i, p) in pending.iter_mut().enumerate() {
            session.post_send(i, plan.size)?;
            *p = PINGPONG_SEND_WRID | PINGPONG_RECV_WRID;
        }
    }
    let iters = u64::from(plan.iters);
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut last_completion = Instant::now();
    while rcnt < iters || scnt < iters {
        if let Some(channel) = &session.channel {
            let cq = wait_cq_event(channel, last_completion + plan.timeout, plan.timeout)?;
            if cq != session.cq.index() {
                return Err(format!("CQ event for unknown CQ {cq}"));
            }
            session.cq.req_notify(false);
        }
        let wcs = session.cq.poll(2 * n).map_err(|e| format!("poll CQ failed: {e}"))?;
        if wcs.is_empty() {
            if last_completion.elapsed() >= plan.timeout {
                return Err(format!(
                    "no completion for {} s: the peer stopped answering",
                    plan.timeout.as_secs()
                ));
            }
            std::hint::spin_loop();
            continue;
        }
        last_completion = Instant::now();
        for wc in wcs {
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc_status_str(wc.status),
                    wc.status.raw(),
                    wc.wr_id as i32
                ));
            }
            let Some(index) = session.qps.iter().position(|qp| qp.qpn() == wc.qp_num) else {
                return Err(format!("Couldn't find QPN {:06x}", wc.qp_num.value()));
            };
            match wc.wr_id {
                PINGPONG_SEND_WRID => scnt += 1,
                PINGPONG_RECV_WRID => {
                    // The peer's whole message, on one of our QPs.
                    if wc.byte_len != plan.size {
                        return Err(format!(
                            "a receive on QP[{index}] got {} bytes, not the {} sent",
                            wc.byte_len, plan.size
                        ));
                    }
                    routs = routs.saturating_sub(1);
                    if routs <= u64::from(num_qp) {
                        routs += session.post_recv(plan.size, rx_depth - routs);
                        if routs < rx_depth {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
            }
            pending[index] &= !wc.wr_id;
            if scnt < iters && pending[index] == 0 {
                session.post_send(index, plan.size)?;
                pending[index] = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID;
            }
        }
    }
    super::print_summary(out, plan, start.elapsed());
    let mut outcome = Outcome::Clean;
    if !client && plan.chk {
        for page in bad_pages(&session.mr, 0, plan.size)? {
            let _ = writeln!(out, "invalid data in page {page}");
            outcome = Outcome::BadData;
        }
    }
    let _ = out.flush();
    super::linger(&dev);
    drop(session);
    drop(dev);
    Ok(outcome)
}
