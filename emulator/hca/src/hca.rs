//! The HCA: tables, the control path, doorbells, and the sans-IO loop that
//! drives the engines.
//!
//! ```text
//!  command() ──▶ tables (PD, MPT/MTT, CQC, QPC, SRQ, AH)
//!  doorbell() ─▶ marks a QP runnable          poll_event() ◀── events
//!  receive() ──▶ responder (requests) / completer (responses)
//!  poll_transmit() ◀── responder queue first, then the requester,
//!                      round-robin over runnable QPs
//!  poll_timeout() / handle_timeout() ◀▶ retransmit and RNR timers
//! ```

use crate::config::{HcaConfig, FIRST_QPN};
use crate::counters::Counters;
use crate::cq::{Arm, CqContext, PostOutcome};
use crate::endpoint::{Endpoint, Transmit};
use crate::mr::{MemoryTables, RegisterError};
use crate::qp::{Completer, Path, QpContext, Requester, Responder};
use crate::qp_state::modify_is_ok;
use crate::ring::{ConsumerRing, ProducerRing, PRODUCER_OFFSET, SCHEDULED_OFFSET};
use crate::tables::Table;
use crate::time::Instant;
use crate::trace::{Step, StepLog};
use core::net::IpAddr;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use uroce_device::command::{
    AhAttr, CmdError, Command, DeviceAttr, Gid, PortAttr, QpAttr, QpInit, Reply,
};
use uroce_device::cqe::{Cqe, CQE_LEN};
pub use uroce_device::doorbell::{Doorbell, Event};
use uroce_device::mem::HostMemory;
use uroce_device::types::{AttrMask, EventType, Mtu, QpState, QpType, Qpn, WcStatus};
use uroce_device::wqe::{recv_stride, send_stride};
use uroce_wire::udp_port;

/// A protection domain.
#[derive(Debug, Default)]
struct PdContext {
    users: u32,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct SrqContext {
    /// Protection domain.
    pub pd: u32,
    /// The ring.
    pub ring: ConsumerRing,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Limit event threshold (0 = disarmed).
    pub limit: u32,
    /// QPs attached.
    pub users: u32,
}

/// An address handle.
#[derive(Debug, Clone, Copy)]
struct AhContext {
    pd: u32,
    path: Path,
}

/// Which per-QP timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// Retransmit timer (requester).
    Retransmit,
    /// End of an RNR wait (requester).
    Rnr,
}

/// Events kept before the oldest is dropped.
const MAX_EVENTS: usize = 4096;

/// The HCA.
pub struct Hca {
    pub(crate) config: HcaConfig,
    gids: Vec<Gid>,
    addresses: Vec<IpAddr>,
    pub(crate) mem: MemoryTables,
    pds: Table<PdContext>,
    pub(crate) cqs: Table<CqContext>,
    pub(crate) qps: Table<QpContext>,
    pub(crate) srqs: Table<SrqContext>,
    ahs: Table<AhContext>,
    /// How many times each QP table slot has been used: a slot's next QP
    /// gets a QPN it has not had for a long time (see [`Hca::qpn_of_slot`]).
    qp_slot_generation: Vec<u32>,
    /// QPs (table indices) that may have packets to send, in turn order.
    sched: VecDeque<u32>,
    /// Armed timers: (when, QP index, which).
    timers: BTreeSet<(Instant, u32, TimerKind)>,
    events: VecDeque<Event>,
    pub(crate) counters: Counters,
    /// The decisions kept for the driver (off unless asked for).
    pub(crate) steps: StepLog,
    ip_id: u16,
    /// The latest time the HCA was given.
    last_now: Instant,
    /// Gather buffer for one packet's payload (path MTU bytes).
    pub(crate) scratch: Vec<u8>,
    /// UDP source ports the runtime cannot send from.
    pub(crate) source_ports: crate::ports::SourcePorts,
}

impl Hca {
    /// A new HCA with GID table `gids` (index order; rxe puts the
    /// link-local GID at 0 and the IPv4-mapped one at 1), reaching host
    /// memory through `host`.
    pub fn new(
        config: HcaConfig,
        gids: Vec<Gid>,
        host: Arc<dyn HostMemory>,
    ) -> Result<Hca, crate::config::ConfigError> {
        config.validate()?;
        if gids.is_empty() || gids.len() > 256 {
            return Err(crate::config::ConfigError("gids: between 1 and 256 entries"));
        }
        let addresses = gids.iter().map(|g| g.to_ip()).collect();
        let mem =
            MemoryTables::new(host, config.max_mr as usize, config.page_shift, config.max_mr_size);
        let mut hca = Hca {
            pds: Table::new(config.max_pd as usize),
            cqs: Table::new(config.max_cq as usize),
            qps: Table::new(config.max_qp as usize),
            srqs: Table::new(config.max_srq as usize),
            ahs: Table::new(config.max_ah as usize),
            qp_slot_generation: vec![0; config.max_qp as usize],
            sched: VecDeque::new(),
            timers: BTreeSet::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
            steps: StepLog::default(),
            ip_id: 0,
            last_now: Instant::ZERO,
            scratch: vec![0; config.active_mtu.bytes() as usize],
            source_ports: crate::ports::SourcePorts::default(),
            gids,
            addresses,
            mem,
            config,
        };
        hca.push_event(Event::Async { event: EventType::PortActive, element: 1 });
        Ok(hca)
    }

    /// The latest time any call handed the HCA: what a same-thread driver
    /// (the simulated fabric's application side) uses as "now".
    pub fn now(&self) -> Instant {
        self.last_now
    }

    fn saw(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
    }

    /// The configuration.
    pub fn config(&self) -> &HcaConfig {
        &self.config
    }

    /// The counters (`dma_faults` is kept by the memory tables, where
    /// every DMA meets host memory).
    pub fn counters(&self) -> Counters {
        Counters { dma_faults: self.mem.dma_faults(), ..self.counters.clone() }
    }

    /// The memory tables (MPT, MTT), for dumps.
    pub fn memory(&self) -> &MemoryTables {
        &self.mem
    }

    /// A QP's context, for dumps and tests.
    pub fn qp(&self, qpn: Qpn) -> Option<&QpContext> {
        self.qps.get(self.qp_slot(qpn)?)
    }

    /// The table slot of the live QP numbered `qpn`. A QPN names a slot and
    /// that slot's generation: the number of a destroyed QP names nothing,
    /// even once its slot holds a new QP.
    pub(crate) fn qp_slot(&self, qpn: Qpn) -> Option<usize> {
        let offset = qpn.value().checked_sub(FIRST_QPN)?;
        let slot = (offset % self.config.max_qp) as usize;
        self.qps.get(slot).filter(|qp| qp.qpn == qpn).map(|_| slot)
    }

    /// The QPN of the next QP in table slot `slot`. QPNs are spread over
    /// the 24-bit space by slot generation (16 + slot + generation times
    /// max_qp), so a new QP does not take the number of one just destroyed:
    /// a delayed or replayed packet of the old connection finds no QP
    /// instead of the new one (rxe allocates QPNs cyclically for the same
    /// reason).
    fn qpn_of_slot(&self, slot: usize) -> Qpn {
        let max_qp = self.config.max_qp;
        let generations = (0x0100_0000 - FIRST_QPN) / max_qp;
        let generation = self.qp_slot_generation[slot] % generations;
        Qpn::new(FIRST_QPN + slot as u32 + generation * max_qp)
    }

    /// Whether some QP may have a packet to send now: a driver that
    /// stopped [`Endpoint::poll_transmit`] early (a burst limit) must come
    /// back without waiting for a timer.
    pub fn has_transmit_ready(&self) -> bool {
        !self.sched.is_empty()
    }

    /// Whether events are waiting for [`Hca::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Keeps up to `capacity` of the HCA's decisions for [`Hca::poll_step`]
    /// (0, the default, turns tracing off). See [`crate::trace`].
    pub fn trace_steps(&mut self, capacity: usize) {
        self.steps.set_capacity(capacity);
    }

    /// The oldest decision kept, and when it was made.
    pub fn poll_step(&mut self) -> Option<(Instant, Step)> {
        self.steps.pop()
    }

    /// Decisions dropped because nobody took them in time.
    pub fn steps_lost(&self) -> u64 {
        self.steps.lost
    }

    /// Records a decision (when tracing is on).
    pub(crate) fn step(&mut self, now: Instant, step: Step) {
        self.steps.record(now, step);
    }

    /// The sequence number of the next decision recorded.
    pub(crate) fn steps_recorded(&self) -> u64 {
        self.steps.recorded()
    }

    /// Records a decision before those recorded since sequence number `at`.
    pub(crate) fn step_before(&mut self, at: u64, now: Instant, step: Step) {
        self.steps.insert(at, now, step);
    }

    pub(crate) fn push_event(&mut self, event: Event) {
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// The next IPv4 identification (rxe: the kernel's per-destination
    /// counter; uroce: one counter per device).
    pub(crate) fn next_ip_id(&mut self) -> u16 {
        if self.config.ipv4_id == crate::config::Ipv4IdPolicy::Zero {
            return 0;
        }
        self.ip_id = self.ip_id.wrapping_add(1);
        self.ip_id
    }

    /// The GID table.
    pub fn gids(&self) -> &[Gid] {
        &self.gids
    }

    // ---- control path -------------------------------------------------

    /// Executes a control-path command.
    pub fn command(&mut self, now: Instant, command: Command) -> Result<Reply, CmdError> {
        self.saw(now);
        match command {
            Command::QueryDevice => Ok(Reply::Device(self.device_attr())),
            Command::QueryPort => Ok(Reply::Port(self.port_attr())),
            Command::QueryGid { index } => self
                .gids
                .get(usize::from(index))
                .map(|g| Reply::Gid(*g))
                .ok_or(CmdError::Invalid("GID index out of range")),
            Command::AllocPd => self
                .pds
                .insert_with(|_| PdContext::default())
                .map(|i| Reply::Index(i as u32))
                .map_err(|_| CmdError::NoResources("PD table full")),
            Command::DeallocPd { pd } => {
                let ctx = self.pds.get(pd as usize).ok_or(CmdError::NotFound("no such PD"))?;
                if ctx.users > 0 {
                    return Err(CmdError::Busy("PD still has MRs, MWs, QPs, SRQs or AHs"));
                }
                self.pds.remove(pd as usize);
                Ok(Reply::Done)
            }
            Command::RegMr { pd, addr, length, iova, access } => {
                self.pd_exists(pd)?;
                let key = self.mem.register(pd, addr, length, iova, access).map_err(reg_error)?;
                self.pd_use(pd, 1);
                Ok(Reply::Mr { lkey: key, rkey: key })
            }
            Command::DeregMr { lkey } => {
                let pd = self.mem.pd_of(lkey).ok_or(CmdError::NotFound("no such MR"))?;
                self.mem.deregister(lkey).map_err(reg_error)?;
                self.pd_use(pd, -1);
                Ok(Reply::Done)
            }
            Command::AllocMw { pd, mw_type } => {
                self.pd_exists(pd)?;
                let rkey = self.mem.alloc_window(pd, mw_type).map_err(reg_error)?;
                self.pd_use(pd, 1);
                Ok(Reply::Mw { rkey })
            }
            Command::DeallocMw { rkey } => {
                let pd = self.mem.pd_of(rkey).ok_or(CmdError::NotFound("no such MW"))?;
                self.mem.dealloc_window(rkey).map_err(reg_error)?;
                self.pd_use(pd, -1);
                Ok(Reply::Done)
            }
            Command::CreateCq { ring } => {
                ring.validate(self.config.max_cqe + 1, CQE_LEN as u32)
                    .map_err(|_| CmdError::Invalid("CQ ring shape"))?;
                if ring.stride != CQE_LEN as u32 {
                    return Err(CmdError::Invalid("CQ stride must be the CQE size"));
                }
                self.cqs
                    .insert_with(|_| CqContext::new(ProducerRing::new(ring)))
                    .map(|i| Reply::Index(i as u32))
                    .map_err(|_| CmdError::NoResources("CQ table full"))
            }
            Command::DestroyCq { cq } => {
                let ctx = self.cqs.get(cq as usize).ok_or(CmdError::NotFound("no such CQ"))?;
                if ctx.users > 0 {
                    return Err(CmdError::Busy("CQ still used by QPs"));
                }
                self.cqs.remove(cq as usize);
                Ok(Reply::Done)
            }
            Command::CreateQp(init) => self.create_qp(init),
            Command::ModifyQp { qpn, attr, mask } => self.modify_qp(now, qpn, &attr, mask),
            Command::QueryQp { qpn } => {
                let qp = self.qp(qpn).ok_or(CmdError::NotFound("no such QP"))?;
                let mut attr = qp.attr;
                attr.qp_state = Some(qp.state);
                attr.cur_qp_state = Some(qp.state);
                attr.cap = qp.cap;
                Ok(Reply::QpAttr(attr))
            }
            Command::DestroyQp { qpn } => self.destroy_qp(qpn),
            Command::CreateSrq { pd, ring, max_sge, limit } => {
                self.pd_exists(pd)?;
                if max_sge == 0 || max_sge > self.config.max_srq_sge {
                    return Err(CmdError::Invalid("SRQ max_sge"));
                }
                ring.validate(self.config.max_srq_wr, recv_stride(max_sge))
                    .map_err(|_| CmdError::Invalid("SRQ ring shape"))?;
                let srq =
                    SrqContext { pd, ring: ConsumerRing::new(ring), max_sge, limit, users: 0 };
                let index = self
                    .srqs
                    .insert_with(|_| srq)
                    .map_err(|_| CmdError::NoResources("SRQ table full"))?;
                self.pd_use(pd, 1);
                Ok(Reply::Index(index as u32))
            }
            Command::ModifySrq { srq, limit } => {
                let ctx =
                    self.srqs.get_mut(srq as usize).ok_or(CmdError::NotFound("no such SRQ"))?;
                if limit > ctx.ring.desc.entries {
                    return Err(CmdError::Invalid("SRQ limit above its size"));
                }
                ctx.limit = limit;
                Ok(Reply::Done)
            }
            Command::DestroySrq { srq } => {
                let ctx = self.srqs.get(srq as usize).ok_or(CmdError::NotFound("no such SRQ"))?;
                if ctx.users > 0 {
                    return Err(CmdError::Busy("SRQ still used by QPs"));
                }
                let pd = ctx.pd;
                self.srqs.remove(srq as usize);
                self.pd_use(pd, -1);
                Ok(Reply::Done)
            }
            Command::CreateAh { pd, attr } => {
                self.pd_exists(pd)?;
                let path = self.resolve_path(&attr)?;
                let index = self
                    .ahs
                    .insert_with(|_| AhContext { pd, path })
                    .map_err(|_| CmdError::NoResources("AH table full"))?;
                self.pd_use(pd, 1);
                Ok(Reply::Index(index as u32))
            }
            Command::DestroyAh { ah } => {
                let ctx = self.ahs.remove(ah as usize).ok_or(CmdError::NotFound("no such AH"))?;
                self.pd_use(ctx.pd, -1);
                Ok(Reply::Done)
            }
        }
    }

    fn pd_exists(&self, pd: u32) -> Result<(), CmdError> {
        self.pds.get(pd as usize).map(|_| ()).ok_or(CmdError::NotFound("no such PD"))
    }

    fn pd_use(&mut self, pd: u32, delta: i32) {
        if let Some(ctx) = self.pds.get_mut(pd as usize) {
            ctx.users = ctx.users.saturating_add_signed(delta);
        }
    }

    /// The source and destination IP of an address vector.
    fn resolve_path(&self, attr: &AhAttr) -> Result<Path, CmdError> {
        let local = *self
            .addresses
            .get(usize::from(attr.sgid_index))
            .ok_or(CmdError::Invalid("sgid_index out of range"))?;
        let remote = attr.dgid.to_ip();
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(CmdError::Invalid("source and destination GIDs of different IP versions"));
        }
        Ok(Path { local, remote })
    }

    pub(crate) fn ah_path(&self, ah: u32, pd: u32) -> Option<Path> {
        self.ahs.get(ah as usize).filter(|a| a.pd == pd).map(|a| a.path)
    }

    fn device_attr(&self) -> DeviceAttr {
        let c = &self.config;
        DeviceAttr {
            fw_ver: format!("uroce {}", env!("CARGO_PKG_VERSION")),
            node_guid: self.node_guid(),
            sys_image_guid: self.node_guid(),
            max_mr_size: c.max_mr_size,
            page_size_cap: 0xffff_f000,
            vendor_id: 0,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: c.max_qp,
            max_qp_wr: c.max_qp_wr,
            max_sge: c.max_sge,
            max_sge_rd: c.max_sge,
            max_cq: c.max_cq,
            max_cqe: c.max_cqe,
            max_mr: c.max_mr,
            max_pd: c.max_pd,
            max_qp_rd_atom: u32::from(c.max_qp_rd_atom),
            max_qp_init_rd_atom: u32::from(c.max_qp_init_rd_atom),
            max_ah: c.max_ah,
            max_srq: c.max_srq,
            max_srq_wr: c.max_srq_wr,
            max_srq_sge: c.max_srq_sge,
            max_inline_data: c.max_inline_data,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }

    fn node_guid(&self) -> u64 {
        // EUI-64 from the link-local GID when there is one.
        let g = self.gids[0].0;
        u64::from_be_bytes([g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]])
    }

    fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: 4,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.config.active_mtu,
            gid_tbl_len: self.gids.len() as u32,
            max_msg_sz: self.config.max_msg_size,
            pkey_tbl_len: 64,
            link_layer: 2,
        }
    }

    fn create_qp(&mut self, init: QpInit) -> Result<Reply, CmdError> {
        let c = &self.config;
        self.pd_exists(init.pd)?;
        let cap = init.cap;
        if cap.max_send_wr == 0 || cap.max_send_wr > c.max_qp_wr {
            return Err(CmdError::Invalid("max_send_wr"));
        }
        if cap.max_send_sge > c.max_sge || cap.max_inline_data > c.max_inline_data {
            return Err(CmdError::Invalid("max_send_sge or max_inline_data"));
        }
        if init.sq.entries < cap.max_send_wr {
            return Err(CmdError::Invalid("SQ ring smaller than max_send_wr"));
        }
        init.sq
            .validate(c.max_qp_wr, send_stride(cap.max_send_sge, cap.max_inline_data))
            .map_err(|_| CmdError::Invalid("SQ ring shape"))?;
        let rq = match (init.srq, init.rq) {
            (Some(srq), None) => {
                if self.srqs.get(srq as usize).is_none_or(|s| s.pd != init.pd) {
                    return Err(CmdError::Invalid("no such SRQ in this PD"));
                }
                None
            }
            (None, Some(rq)) => {
                if cap.max_recv_wr == 0
                    || cap.max_recv_wr > c.max_qp_wr
                    || rq.entries < cap.max_recv_wr
                {
                    return Err(CmdError::Invalid("max_recv_wr"));
                }
                if cap.max_recv_sge == 0 || cap.max_recv_sge > c.max_sge {
                    return Err(CmdError::Invalid("max_recv_sge"));
                }
                rq.validate(c.max_qp_wr, recv_stride(cap.max_recv_sge))
                    .map_err(|_| CmdError::Invalid("RQ ring shape"))?;
                Some(ConsumerRing::new(rq))
            }
            _ => return Err(CmdError::Invalid("a QP has an RQ or an SRQ, not both or neither")),
        };
        for cq in [init.send_cq, init.recv_cq] {
            if self.cqs.get(cq as usize).is_none() {
                return Err(CmdError::Invalid("no such CQ"));
            }
        }
        let entries = init.sq.entries as usize;
        let index = self
            .qps
            .insert_with(|_| QpContext {
                qpn: Qpn::new(0),
                qp_type: init.qp_type,
                state: QpState::Reset,
                pd: init.pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: init.srq,
                sq: ConsumerRing::new(init.sq),
                rq,
                cap,
                sq_sig_all: init.sq_sig_all,
                attr: QpAttr::default(),
                path: None,
                sport: 0,
                sq_shadow: vec![None; entries],
                fetched: 0,
                req: Requester::default(),
                comp: Completer::default(),
                resp: Responder::default(),
                scheduled: false,
                sq_doorbell_seen: 0,
                sent_pkts: 0,
            })
            .map_err(|_| CmdError::NoResources("QP table full"))?;
        self.pd_use(init.pd, 1);
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(ctx) = self.cqs.get_mut(cq as usize) {
                ctx.users += 1;
            }
        }
        if let Some(srq) = init.srq.and_then(|s| self.srqs.get_mut(s as usize)) {
            srq.users += 1;
        }
        let qpn = self.qpn_of_slot(index);
        if let Some(qp) = self.qps.get_mut(index) {
            qp.qpn = qpn;
            if init.qp_type == QpType::Ud {
                qp.sport = udp_port::datagram_sport(qpn);
            }
        }
        Ok(Reply::Qp { qpn })
    }

    fn destroy_qp(&mut self, qpn: Qpn) -> Result<Reply, CmdError> {
        let index = self.qp_slot(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        let qp = self.qps.remove(index).ok_or(CmdError::NotFound("no such QP"))?;
        self.qp_slot_generation[index] = self.qp_slot_generation[index].wrapping_add(1);
        self.cancel_timer(index as u32, TimerKind::Retransmit);
        self.cancel_timer(index as u32, TimerKind::Rnr);
        self.sched.retain(|&i| i != index as u32);
        self.pd_use(qp.pd, -1);
        for cq in [qp.send_cq, qp.recv_cq] {
            if let Some(ctx) = self.cqs.get_mut(cq as usize) {
                ctx.users = ctx.users.saturating_sub(1);
            }
        }
        if let Some(srq) = qp.srq.and_then(|s| self.srqs.get_mut(s as usize)) {
            srq.users = srq.users.saturating_sub(1);
        }
        Ok(Reply::Done)
    }

    fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<Reply, CmdError> {
        let index = self.qp_slot(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        let path = if mask.contains(AttrMask::AV) {
            Some(self.resolve_path(&attr.ah_attr)?)
        } else {
            None
        };
        let config = self.config.clone();
        let qp = self.qps.get_mut(index).ok_or(CmdError::NotFound("no such QP"))?;
        let from = qp.state;
        let to = if mask.contains(AttrMask::STATE) {
            attr.qp_state.ok_or(CmdError::Invalid("STATE in the mask without a qp_state"))?
        } else {
            from
        };
        if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != Some(from) {
            return Err(CmdError::Invalid("cur_qp_state is not the QP's state"));
        }
        if !modify_is_ok(from, to, qp.qp_type, mask) {
            return Err(CmdError::Invalid("attribute mask not allowed for this transition"));
        }
        validate_attr_values(attr, mask, &config)?;
        apply_attrs(qp, attr, mask, path);
        qp.state = to;
        match to {
            QpState::Reset => reset_qp(qp),
            QpState::Rtr if from == QpState::Init => {
                qp.resp.epsn = uroce_wire::Psn::new(qp.attr.rq_psn);
                let slots = usize::from(qp.attr.max_dest_rd_atomic.max(1));
                qp.resp.resources = vec![None; slots];
                if qp.qp_type != QpType::Ud {
                    let remote = Qpn::new(qp.attr.dest_qp_num);
                    qp.sport = udp_port::connected_sport(qpn, remote, qp.attr.ah_attr.flow_label);
                }
            }
            QpState::Rts if from == QpState::Rtr => {
                let psn = uroce_wire::Psn::new(qp.attr.sq_psn);
                qp.req.next_psn = psn;
                qp.comp.psn = psn;
                qp.comp.retry_left = qp.attr.retry_cnt;
                qp.comp.rnr_retry_left = qp.attr.rnr_retry;
            }
            _ => {}
        }
        if to == QpState::Err && from != QpState::Err {
            self.enter_error(now, index as u32);
        } else if matches!(to, QpState::Rts | QpState::Sqe | QpState::Sqd) {
            self.schedule(index as u32);
            if to == QpState::Sqd {
                self.sq_drained_check(index as u32);
            }
        }
        Ok(Reply::Done)
    }

    // ---- doorbells and scheduling -------------------------------------

    /// Rings a doorbell.
    pub fn doorbell(&mut self, now: Instant, doorbell: Doorbell) {
        self.saw(now);
        match doorbell {
            Doorbell::SendQueue(qpn) | Doorbell::RecvQueue(qpn) => {
                let Some(index) = self.qp_slot(qpn) else {
                    return;
                };
                let state = self.qps.get(index).map(|qp| qp.state);
                match (state, doorbell) {
                    (Some(QpState::Err), _) => self.flush(now, index as u32),
                    // SQE: sends flush, receives go on.
                    (Some(QpState::Sqe), Doorbell::SendQueue(_)) => {
                        self.flush_send_queue(now, index as u32)
                    }
                    _ => self.schedule(index as u32),
                }
            }
            Doorbell::Srq(_) => {}
            Doorbell::ArmCq { cq, solicited_only } => {
                if let Some(ctx) = self.cqs.get_mut(cq as usize) {
                    ctx.arm = if solicited_only { Arm::SolicitedOnly } else { Arm::Next };
                }
            }
        }
    }

    /// Puts a QP in the transmit schedule, and raises its send queue's
    /// device-scheduled flag: until it comes down the driver may skip the
    /// kick after a post, since the HCA will look at the queue anyway.
    pub(crate) fn schedule(&mut self, index: u32) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        if qp.scheduled {
            return;
        }
        qp.scheduled = true;
        self.sched.push_back(index);
        // A fault here (the application freed its ring) is met again,
        // and reported, when the queue is read.
        let _ = self.mem.host().store_release_u32(qp.sq.desc.base + SCHEDULED_OFFSET, 1);
    }

    /// Takes a QP with nothing to send out of the schedule and lowers the
    /// flag. A post published while the flag was still up was not kicked:
    /// after the fence the producer index is read again, and a post the
    /// HCA has not seen this way is taken as its doorbell would have been
    /// (the store-load pattern of `uroce_device::ring`).
    fn unschedule(&mut self, now: Instant, index: u32) {
        let host = self.mem.host().clone();
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        qp.scheduled = false;
        let base = qp.sq.desc.base;
        let _ = host.store_release_u32(base + SCHEDULED_OFFSET, 0);
        host.fence_seq_cst();
        let Ok(producer) = host.load_acquire_u32(base + PRODUCER_OFFSET) else { return };
        if producer != qp.sq_doorbell_seen {
            qp.sq_doorbell_seen = producer;
            let qpn = qp.qpn;
            self.doorbell(now, Doorbell::SendQueue(qpn));
        }
    }

    // ---- timers ---------------------------------------------------------

    pub(crate) fn set_timer(&mut self, index: u32, kind: TimerKind, at: Option<Instant>) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let slot = match kind {
            TimerKind::Retransmit => &mut qp.comp.retransmit_at,
            TimerKind::Rnr => &mut qp.comp.rnr_until,
        };
        if let Some(old) = slot.take() {
            self.timers.remove(&(old, index, kind));
        }
        *slot = at;
        if let Some(at) = at {
            self.timers.insert((at, index, kind));
        }
    }

    pub(crate) fn cancel_timer(&mut self, index: u32, kind: TimerKind) {
        self.set_timer(index, kind, None);
    }

    // ---- completions ----------------------------------------------------

    /// Writes a CQE to CQ `cq`, raising the events it calls for. An
    /// overrun raises CQ_ERR and moves the QP to the error state.
    pub(crate) fn post_cqe(&mut self, now: Instant, cq: u32, cqe: &Cqe, solicited: bool) {
        let (qpn, wr_id, status, opcode) = (cqe.qp_num, cqe.wr_id, cqe.status, cqe.opcode);
        self.step(now, Step::Completion { qpn, cq, wr_id, status, opcode });
        let outcome = match self.cqs.get_mut(cq as usize) {
            Some(ctx) => ctx.post(self.mem.host().as_ref(), cqe, solicited),
            None => PostOutcome::Overrun,
        };
        match outcome {
            PostOutcome::Written { notify: true } => self.push_event(Event::Completion { cq }),
            PostOutcome::Written { notify: false } => {}
            PostOutcome::Overrun => {
                self.counters.cq_overrun += 1;
                self.push_event(Event::Async { event: EventType::CqErr, element: cq });
                if let Some(index) = self.qp_slot(cqe.qp_num) {
                    let is_live = self.qps.get(index).is_some_and(|q| q.state != QpState::Err);
                    if is_live {
                        self.fatal(now, index as u32);
                    }
                }
            }
        }
    }

    /// A QP hit an error it cannot report through a completion: QP_FATAL.
    pub(crate) fn fatal(&mut self, now: Instant, index: u32) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let qpn = qp.qpn.value();
        qp.state = QpState::Err;
        self.push_event(Event::Async { event: EventType::QpFatal, element: qpn });
        self.enter_error(now, index);
    }

    /// The QP entered the error state: stop its timers and flush its queues.
    pub(crate) fn enter_error(&mut self, now: Instant, index: u32) {
        self.cancel_timer(index, TimerKind::Retransmit);
        self.cancel_timer(index, TimerKind::Rnr);
        if let Some(qp) = self.qps.get_mut(index as usize) {
            // Nothing more is answered, except a NAK that explains the
            // error to the peer.
            qp.resp.queue.retain(|r| {
                matches!(
                    r,
                    crate::qp::Response::Ack { syndrome: uroce_wire::aeth::Syndrome::Nak(_), .. }
                )
            });
            qp.resp.msg = None;
            if qp.srq.is_some() {
                let qpn = qp.qpn.value();
                self.push_event(Event::Async { event: EventType::QpLastWqeReached, element: qpn });
            }
        }
        self.flush(now, index);
    }

    /// Completes every outstanding and newly posted WQE of a QP in the
    /// error state with WR_FLUSH_ERR (send queue, then receive queue).
    pub(crate) fn flush(&mut self, now: Instant, index: u32) {
        self.flush_send_queue(now, index);
        self.flush_recv_queue(now, index);
    }

    fn flush_recv_queue(&mut self, now: Instant, index: u32) {
        let Some(qp) = self.qps.get_mut(index as usize) else { return };
        let (qpn, cq) = (qp.qpn, qp.recv_cq);
        let Some(mut rq) = qp.rq else { return };
        let max_sge = qp.cap.max_recv_sge;
        let host = self.mem.host().clone();
        if rq.refresh(host.as_ref()).is_err() {
            // A bogus producer index: nothing can be trusted in this ring.
            return;
        }
        let mut slot = vec![0u8; rq.desc.stride as usize];
        while rq.available() > 0 {
            let wr_id = match rq.read_entry(host.as_ref(), rq.consumer, &mut slot) {
                Ok(()) => uroce_device::wqe::RecvWqe::decode(&slot, max_sge)
                    .map_or(uroce_device::wqe::slot_wr_id(&slot), |w| w.wr_id),
                Err(_) => break,
            };
            if rq.consume(host.as_ref(), 1).is_err() {
                break;
            }
            let cqe =
                Cqe::new(wr_id, WcStatus::WrFlushErr, uroce_device::types::WcOpcode::Recv, qpn);
            self.post_cqe(now, cq, &cqe, true);
        }
        if let Some(qp) = self.qps.get_mut(index as usize) {
            qp.rq = Some(rq);
        }
    }
}

/// The table index of a QPN.
fn reg_error(e: RegisterError) -> CmdError {
    match e {
        RegisterError::TableFull => CmdError::NoResources("MPT or MTT table full"),
        RegisterError::BadArgument => CmdError::Invalid("bad address, length or access"),
        RegisterError::AccessNeedsLocalWrite => {
            CmdError::Invalid("remote write or atomic access needs local write")
        }
        RegisterError::Busy => CmdError::Busy("memory windows are bound to the region"),
        RegisterError::NotFound => CmdError::NotFound("no such key"),
    }
}

fn validate_attr_values(attr: &QpAttr, mask: AttrMask, config: &HcaConfig) -> Result<(), CmdError> {
    let bad = |ok: bool, why| if ok { Ok(()) } else { Err(CmdError::Invalid(why)) };
    if mask.contains(AttrMask::PATH_MTU) {
        let mtu = attr.path_mtu.ok_or(CmdError::Invalid("path_mtu missing"))?;
        bad(mtu.bytes() <= config.active_mtu.bytes(), "path_mtu above the port's active MTU")?;
    }
    if mask.contains(AttrMask::PORT) {
        bad(attr.port_num == 1, "port_num must be 1")?;
    }
    if mask.contains(AttrMask::PKEY_INDEX) {
        bad(attr.pkey_index == 0, "pkey_index must be 0 (one partition)")?;
    }
    if mask.contains(AttrMask::TIMEOUT) {
        bad(attr.timeout <= 31, "timeout above 31")?;
    }
    if mask.contains(AttrMask::RETRY_CNT) {
        bad(attr.retry_cnt <= 7, "retry_cnt above 7")?;
    }
    if mask.contains(AttrMask::RNR_RETRY) {
        bad(attr.rnr_retry <= 7, "rnr_retry above 7")?;
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) {
        bad(attr.min_rnr_timer <= 31, "min_rnr_timer above 31")?;
    }
    if mask.contains(AttrMask::MAX_QP_RD_ATOMIC) {
        bad(attr.max_rd_atomic <= config.max_qp_init_rd_atom, "max_rd_atomic above the device's")?;
    }
    if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
        bad(
            attr.max_dest_rd_atomic <= config.max_qp_rd_atom,
            "max_dest_rd_atomic above the device's",
        )?;
    }
    if mask.contains(AttrMask::DEST_QPN) {
        bad(attr.dest_qp_num <= Qpn::MAX, "dest_qp_num above 24 bits")?;
    }
    if mask.contains(AttrMask::ACCESS_FLAGS) {
        bad(!attr.qp_access_flags.has_unknown_bits(), "unknown access flags")?;
    }
    bad(!mask.contains(AttrMask::ALT_PATH), "alternate paths are not supported on RoCE")?;
    bad(!mask.contains(AttrMask::RATE_LIMIT), "rate limits are not supported")?;
    Ok(())
}

fn apply_attrs(qp: &mut QpContext, attr: &QpAttr, mask: AttrMask, path: Option<Path>) {
    let a = &mut qp.attr;
    let m = |bit| mask.contains(bit);
    if m(AttrMask::ACCESS_FLAGS) {
        a.qp_access_flags = attr.qp_access_flags;
    }
    if m(AttrMask::PKEY_INDEX) {
        a.pkey_index = attr.pkey_index;
    }
    if m(AttrMask::PORT) {
        a.port_num = attr.port_num;
    }
    if m(AttrMask::QKEY) {
        a.qkey = attr.qkey;
    }
    if m(AttrMask::AV) {
        a.ah_attr = attr.ah_attr;
        qp.path = path;
    }
    if m(AttrMask::PATH_MTU) {
        a.path_mtu = attr.path_mtu;
    }
    if m(AttrMask::TIMEOUT) {
        a.timeout = attr.timeout;
    }
    if m(AttrMask::RETRY_CNT) {
        a.retry_cnt = attr.retry_cnt;
        qp.comp.retry_left = attr.retry_cnt;
    }
    if m(AttrMask::RNR_RETRY) {
        a.rnr_retry = attr.rnr_retry;
        qp.comp.rnr_retry_left = attr.rnr_retry;
    }
    if m(AttrMask::RQ_PSN) {
        a.rq_psn = attr.rq_psn & 0x00ff_ffff;
    }
    if m(AttrMask::SQ_PSN) {
        a.sq_psn = attr.sq_psn & 0x00ff_ffff;
    }
    if m(AttrMask::MAX_QP_RD_ATOMIC) {
        a.max_rd_atomic = attr.max_rd_atomic;
    }
    if m(AttrMask::MAX_DEST_RD_ATOMIC) {
        a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    }
    if m(AttrMask::MIN_RNR_TIMER) {
        a.min_rnr_timer = attr.min_rnr_timer;
    }
    if m(AttrMask::DEST_QPN) {
        a.dest_qp_num = attr.dest_qp_num;
    }
    if m(AttrMask::EN_SQD_ASYNC_NOTIFY) {
        a.en_sqd_async_notify = attr.en_sqd_async_notify;
    }
}

/// Back to a freshly created QP: engines cleared, rings empty.
fn reset_qp(qp: &mut QpContext) {
    qp.attr = QpAttr::default();
    qp.path = None;
    qp.req = Requester::default();
    qp.comp = Completer::default();
    qp.resp = Responder::default();
    qp.sq = ConsumerRing::new(qp.sq.desc);
    qp.rq = qp.rq.map(|rq| ConsumerRing::new(rq.desc));
    qp.fetched = 0;
    qp.sq_doorbell_seen = 0;
    qp.sq_shadow.iter_mut().for_each(|e| *e = None);
}

impl Endpoint for Hca {
    fn addresses(&self) -> &[IpAddr] {
        &self.addresses
    }

    fn receive(&mut self, now: Instant, packet: &[u8]) {
        self.saw(now);
        self.receive_packet(now, packet);
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.saw(now);
        let turns = self.sched.len();
        for _ in 0..turns {
            let index = self.sched.pop_front()?;
            if let Some(transmit) = self.transmit_from(now, index, buf) {
                if self.qps.get(index as usize).is_some() {
                    self.sched.push_back(index);
                }
                self.counters.sent_pkts += 1;
                return Some(transmit);
            }
            self.unschedule(now, index);
        }
        None
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(at, _, _)| at)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.saw(now);
        while let Some(&(at, index, kind)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            if let Some(qp) = self.qps.get_mut(index as usize) {
                match kind {
                    TimerKind::Retransmit => qp.comp.retransmit_at = None,
                    TimerKind::Rnr => qp.comp.rnr_until = None,
                }
            }
            match kind {
                TimerKind::Retransmit => self.retransmit_timeout(now, index),
                TimerKind::Rnr => self.rnr_wait_over(now, index),
            }
        }
    }
}
