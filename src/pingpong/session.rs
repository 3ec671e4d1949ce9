//! One end's verbs objects (`struct pingpong_context`) and what it does
//! with them: post, poll, wait for completion events, check the data.

use super::*;

/// The verbs objects of one end (`struct pingpong_context`). Fields drop
/// in order: the QP and AH before the memory, the CQ, the PD, the context.
pub(super) struct Session {
    pub(super) qp: Qp,
    pub(super) ah: Option<uroce_verbs::Ah>,
    pub(super) mr: Mr,
    pub(super) cq: Cq,
    pub(super) channel: Option<CompChannel>,
    pub(super) pd: Pd,
    pub(super) ctx: Context,
    pub(super) plan: Plan,
}

impl Session {
    /// `pp_init_ctx`: buffer, PD, MR, CQ (with a channel for `-e`), QP in
    /// INIT.
    pub(super) fn open(dev: &UdpDevice, plan: &Plan) -> Result<Session, String> {
        let ctx = Context::open(dev.hca());
        let size = u64::from(plan.size);
        let buf_len = match plan.transport {
            Transport::Ud => size + GRH_LEN,
            _ => size,
        };
        let port = ctx.query_port().map_err(|e| format!("Couldn't get port info: {e}"))?;
        if plan.transport == Transport::Ud && plan.size > port.active_mtu.bytes() {
            return Err(format!(
                "Requested size larger than port MTU ({})",
                port.active_mtu.bytes()
            ));
        }
        if plan.size > port.max_msg_sz {
            return Err(format!(
                "Requested size larger than the largest message ({})",
                port.max_msg_sz
            ));
        }
        let channel = plan.events.then(|| open_channel(&ctx)).transpose()?;
        let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
        let mr = pd
            .alloc_mr(buf_len, Access::LOCAL_WRITE)
            .map_err(|e| format!("Couldn't register MR: {e}"))?;
        // The C tools fill the buffer with 0x7b.
        let fill = usize::try_from(buf_len).map_err(|_| "the buffer is too large".to_string())?;
        mr.write(0, &vec![0x7b; fill]).map_err(|e| format!("Couldn't fill the buffer: {e}"))?;
        let cqe = plan.rx_depth.saturating_add(1);
        let cq = create_cq(&ctx, cqe, channel.as_ref())?;
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: plan.transport.qp_type(),
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1,
                    max_recv_wr: plan.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .map_err(|e| format!("Couldn't create QP: {e}"))?;
        connect::to_init(&qp, Access(0), UD_QKEY)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
        Ok(Session { qp, ah: None, mr, cq, channel, pd, ctx, plan: plan.clone() })
    }

    /// `pp_post_recv`: posts up to `n` receives; returns how many.
    pub(super) fn post_recv(&self, n: u64) -> u64 {
        let len = match self.plan.transport {
            Transport::Ud => self.plan.size.saturating_add(GRH_LEN as u32),
            _ => self.plan.size,
        };
        let wr = RecvWr { wr_id: PINGPONG_RECV_WRID, sg_list: vec![self.mr.sge(0, len)] };
        let mut posted = 0;
        while posted < n && self.qp.post_recv(std::slice::from_ref(&wr)).is_ok() {
            posted += 1;
        }
        posted
    }

    /// `pp_post_send`.
    pub(super) fn post_send(&self, remote_qpn: u32) -> Result<(), String> {
        let mut wr = SendWr::new(PINGPONG_SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        match (self.plan.transport, &self.ah) {
            (Transport::Ud, Some(ah)) => {
                wr.sg_list = vec![self.mr.sge(GRH_LEN, self.plan.size)];
                wr.ud = Some((ah.index(), Qpn::new(remote_qpn), Qkey(UD_QKEY)));
            }
            (Transport::Ud, None) => return Err("Couldn't post send: no address handle".into()),
            _ => wr.sg_list = vec![self.mr.sge(0, self.plan.size)],
        }
        self.qp.post_send(&[wr]).map_err(|(_, e)| format!("Couldn't post send: {e}"))
    }

    /// `pp_connect_ctx`: RTR and RTS towards `dest` (RC, UC), or RTR, RTS
    /// and an address handle (UD).
    pub(super) fn connect(&mut self, my_psn: u32, dest: &Dest) -> Result<(), String> {
        // `if (dest->gid.global.interface_id)`: without it the C tools use a
        // LID, which RoCE does not have.
        if dest.gid.0[8..16].iter().all(|b| *b == 0) {
            return Err(format!(
                "Failed to modify QP to RTR: the remote GID {} has no interface ID \
                 (run the other side with -g 1: RoCE needs a GID)",
                inet_ntop6(&dest.gid)
            ));
        }
        let tuning = c_tool_tuning(&self.plan, my_psn);
        if self.plan.transport == Transport::Ud {
            connect::to_rts(&self.qp, None, &tuning)
                .map_err(|e| format!("Failed to modify QP to RTR/RTS: {e}"))?;
            let ah_attr = AhAttr {
                dgid: dest.gid,
                sgid_index: tuning.sgid_index,
                hop_limit: tuning.hop_limit,
                sl: tuning.sl,
                port_num: 1,
                ..AhAttr::default()
            };
            let ah = self.pd.create_ah(ah_attr).map_err(|e| format!("Failed to create AH: {e}"))?;
            self.ah = Some(ah);
            return Ok(());
        }
        let remote = Remote { gid: dest.gid, qpn: Qpn::new(dest.qpn), psn: dest.psn };
        connect::to_rts(&self.qp, Some(remote), &tuning)
            .map_err(|e| format!("Failed to modify QP to RTR/RTS: {e}"))
    }

    /// The offset of the message in the buffer (after the GRH for UD).
    pub(super) fn data_offset(&self) -> u64 {
        match self.plan.transport {
            Transport::Ud => GRH_LEN,
            _ => 0,
        }
    }

    /// `-c` on the client: marks every page of the message.
    pub(super) fn mark_pages(&self) -> Result<(), String> {
        mark_pages(&self.mr, self.data_offset(), self.plan.size)
    }

    /// `-c` on the server: the pages whose first byte is not the client's.
    pub(super) fn bad_pages(&self) -> Result<Vec<u64>, String> {
        bad_pages(&self.mr, self.data_offset(), self.plan.size)
    }

    /// Up to two completions: with `-e` whatever is there, otherwise spin
    /// until at least one (bounded by `deadline`).
    pub(super) fn poll_two(&self, deadline: Instant) -> Result<Vec<WorkCompletion>, String> {
        loop {
            let wcs = self.cq.poll(2).map_err(|e| format!("poll CQ failed: {e}"))?;
            if !wcs.is_empty() || self.channel.is_some() {
                return Ok(wcs);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no completion for {} s: the peer stopped answering (or a packet was \
                     lost on an unreliable transport)",
                    self.plan.timeout.as_secs()
                ));
            }
            std::hint::spin_loop();
        }
    }

    /// The ping-pong loop; returns its duration.
    pub(super) fn pingpong(
        &self,
        remote_qpn: u32,
        client: bool,
        mut routs: u64,
    ) -> Result<Duration, String> {
        let plan = &self.plan;
        let iters = u64::from(plan.iters);
        let rx_depth = u64::from(plan.rx_depth);
        let mut pending = PINGPONG_RECV_WRID;
        if client {
            if plan.chk {
                self.mark_pages()?;
            }
            self.post_send(remote_qpn)?;
            pending |= PINGPONG_SEND_WRID;
        }
        let start = Instant::now();
        let (mut rcnt, mut scnt) = (0u64, 0u64);
        let mut last_completion = Instant::now();
        while rcnt < iters || scnt < iters {
            let deadline = last_completion + plan.timeout;
            if let Some(channel) = &self.channel {
                let cq = wait_cq_event(channel, deadline, plan.timeout)?;
                if cq != self.cq.index() {
                    return Err(format!("CQ event for unknown CQ {cq}"));
                }
                self.cq.req_notify(false);
            }
            let wcs = self.poll_two(deadline)?;
            if !wcs.is_empty() {
                last_completion = Instant::now();
            }
            for wc in wcs {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "Failed status {} ({}) for wr_id {}",
                        wc_status_str(wc.status),
                        wc.status.raw(),
                        wc.wr_id as i32
                    ));
                }
                match wc.wr_id {
                    PINGPONG_SEND_WRID => scnt += 1,
                    PINGPONG_RECV_WRID => {
                        routs = routs.saturating_sub(1);
                        if routs <= 1 {
                            routs += self.post_recv(rx_depth - routs);
                            if routs < rx_depth {
                                return Err(format!("Couldn't post receive ({routs})"));
                            }
                        }
                        rcnt += 1;
                    }
                    other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
                }
                pending &= !wc.wr_id;
                if scnt < iters && pending == 0 {
                    self.post_send(remote_qpn)?;
                    pending = PINGPONG_RECV_WRID | PINGPONG_SEND_WRID;
                }
            }
        }
        Ok(start.elapsed())
    }
}

/// The connection attributes of the C tools' `pp_connect_ctx`: path MTU
/// `-m`, hop limit 1, SL `-l`, timeout 14, 7 retries, infinite RNR
/// retries, RNR timer 12, one READ/atomic credit each way.
pub(super) fn c_tool_tuning(plan: &Plan, sq_psn: u32) -> Tuning {
    Tuning {
        mtu: plan.mtu,
        sq_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        rd_atomic: 1,
        sgid_index: plan.gid_idx,
        hop_limit: 1,
        sl: plan.sl,
    }
}

/// The completion channel of `-e`.
pub(super) fn open_channel(ctx: &Context) -> Result<CompChannel, String> {
    ctx.create_comp_channel().map_err(|e| format!("Couldn't create completion channel: {e}"))
}

/// The CQ, on the channel when there is one (`-e`).
pub(super) fn create_cq(
    ctx: &Context,
    cqe: u32,
    channel: Option<&CompChannel>,
) -> Result<Cq, String> {
    match channel {
        Some(channel) => ctx.create_cq_with_channel(cqe, channel),
        None => ctx.create_cq(cqe),
    }
    .map_err(|e| format!("Couldn't create CQ: {e}"))
}

/// `-c` on the client: `buf[i] = i / page_size % sizeof(char)` (0) at
/// every page start of the `size`-byte message at `offset`.
pub(super) fn mark_pages(mr: &Mr, offset: u64, size: u32) -> Result<(), String> {
    let mut i = 0;
    while i < u64::from(size) {
        mr.write(offset + i, &[PAGE_MARK]).map_err(|e| e.to_string())?;
        i += PAGE_SIZE;
    }
    Ok(())
}

/// `-c` on the server: the pages of the message at `offset` whose first
/// byte is not the client's mark.
pub(super) fn bad_pages(mr: &Mr, offset: u64, size: u32) -> Result<Vec<u64>, String> {
    let mut bad = Vec::new();
    let mut i = 0;
    while i < u64::from(size) {
        let mut byte = [0u8];
        mr.read(offset + i, &mut byte).map_err(|e| e.to_string())?;
        if byte[0] != PAGE_MARK {
            bad.push(i / PAGE_SIZE);
        }
        i += PAGE_SIZE;
    }
    Ok(bad)
}

/// Waits for a completion event on the channel (the blocking
/// `ibv_get_cq_event` of `-e`): `poll(2)` on the channel's descriptor,
/// until `deadline`; `timeout` is only for the message.
pub(super) fn wait_cq_event(
    channel: &CompChannel,
    deadline: Instant,
    timeout: Duration,
) -> Result<u32, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use rustix::fd::AsFd;
    loop {
        if let Some(cq) = channel.get_cq_event() {
            return Ok(cq);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "Failed to get cq_event: no completion event for {} s",
                timeout.as_secs()
            ));
        }
        let left = (deadline - now).min(Duration::from_millis(100));
        let timespec = Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
        let mut fds = [PollFd::from_borrowed_fd(channel.as_fd(), PollFlags::IN)];
        poll(&mut fds, Some(&timespec)).map_err(|e| format!("poll on the channel: {e}"))?;
    }
}
