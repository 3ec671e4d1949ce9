//! The control path: commands that create, query and destroy PDs, MRs,
//! MWs, CQs, SRQs and AHs, and the device and port queries (QP commands
//! are in `qp_command.rs`).

use super::{AhContext, Hca, PdContext, SrqContext};
use crate::cq::CqContext;
use crate::handles::{AhIndex, CqIndex, PdIndex, SrqIndex};
use crate::mr::{RegisterError, Reregistration};
use crate::qp::Path;
use crate::ring::{ConsumerRing, ProducerRing, CONSUMER_OFFSET, PRODUCER_OFFSET};
use crate::tables::Table;
use crate::time::Instant;
use uroce_device::command::{AhAttr, CmdError, Command, DeviceAttr, PortAttr, Reply};
use uroce_device::cqe::CQE_LEN;
use uroce_device::ring::RingDesc;
use uroce_device::types::{Access, Mtu};
use uroce_device::wqe::recv_stride;

impl Hca {
    /// Executes a control-path command: the handles it names are typed
    /// here, and each command has its function.
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
                .map(|pd| Reply::Index(pd.value()))
                .map_err(|_| CmdError::NoResources("PD table full")),
            Command::DeallocPd { pd } => self.dealloc_pd(PdIndex(pd)),
            Command::RegMr { pd, addr, length, iova, access } => {
                self.reg_mr(PdIndex(pd), addr, length, iova, access)
            }
            Command::ReregMr { lkey, pd, translation, access } => {
                let change = Reregistration {
                    pd: pd.map(PdIndex),
                    translation: translation.map(|t| (t.addr, t.length, t.iova)),
                    access,
                };
                self.rereg_mr(lkey, change)
            }
            Command::DeregMr { lkey } => self.dereg_mr(lkey),
            Command::AllocMw { pd, mw_type } => self.alloc_mw(PdIndex(pd), mw_type),
            Command::DeallocMw { rkey } => self.dealloc_mw(rkey),
            Command::CreateCq { ring } => self.create_cq(ring),
            Command::ResizeCq { cq, ring } => self.resize_cq(CqIndex(cq), ring),
            Command::DestroyCq { cq } => self.destroy_cq(CqIndex(cq)),
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
                self.create_srq(PdIndex(pd), ring, max_sge, limit)
            }
            Command::ModifySrq { srq, limit } => self.modify_srq(SrqIndex(srq), limit),
            Command::DestroySrq { srq } => self.destroy_srq(SrqIndex(srq)),
            Command::CreateAh { pd, attr } => self.create_ah(PdIndex(pd), &attr),
            Command::DestroyAh { ah } => {
                let ctx =
                    self.dev.ahs.remove(AhIndex(ah)).ok_or(CmdError::NotFound("no such AH"))?;
                self.pd_use(ctx.pd, -1);
                Ok(Reply::Done)
            }
            Command::AttachMcast { qpn, gid, lid: _ } => self.attach_mcast(qpn, gid),
            Command::DetachMcast { qpn, gid, lid: _ } => self.detach_mcast(qpn, gid),
            cm @ (Command::CmListen { .. }
            | Command::CmUnlisten { .. }
            | Command::CmConnect { .. }
            | Command::CmAccept { .. }
            | Command::CmReject { .. }
            | Command::CmReadyToUse { .. }
            | Command::CmMra { .. }
            | Command::CmEstablished { .. }
            | Command::CmDisconnect { .. }
            | Command::CmDestroy { .. }
            | Command::CmSidrRequest { .. }
            | Command::CmSidrReply { .. }
            | Command::CmPollEvent) => self.cm_command(now, cm),
        }
    }

    fn dealloc_pd(&mut self, pd: PdIndex) -> Result<Reply, CmdError> {
        let ctx = self.pds.get(pd).ok_or(CmdError::NotFound("no such PD"))?;
        if ctx.users > 0 {
            return Err(CmdError::Busy("PD still has MRs, MWs, QPs, SRQs or AHs"));
        }
        self.pds.remove(pd);
        Ok(Reply::Done)
    }

    fn reg_mr(
        &mut self,
        pd: PdIndex,
        addr: u64,
        length: u64,
        iova: u64,
        access: Access,
    ) -> Result<Reply, CmdError> {
        self.pd_exists(pd)?;
        let key = self.dev.mem.register(pd, addr, length, iova, access).map_err(reg_error)?;
        self.pd_use(pd, 1);
        Ok(Reply::Mr { lkey: key, rkey: key })
    }

    /// `ibv_rereg_mr`: the region changes in place and keeps its keys
    /// (the reply repeats them, as the kernel's does).
    fn rereg_mr(&mut self, lkey: u32, change: Reregistration) -> Result<Reply, CmdError> {
        if change == Reregistration::default() {
            return Err(CmdError::Invalid("a re-registration that changes nothing"));
        }
        if let Some(pd) = change.pd {
            self.pd_exists(pd)?;
        }
        let old_pd = self.dev.mem.reregister(lkey, change).map_err(reg_error)?;
        if let Some(pd) = change.pd {
            self.pd_use(old_pd, -1);
            self.pd_use(pd, 1);
        }
        Ok(Reply::Mr { lkey, rkey: lkey })
    }

    fn dereg_mr(&mut self, lkey: u32) -> Result<Reply, CmdError> {
        let pd = self.dev.mem.pd_of(lkey).ok_or(CmdError::NotFound("no such MR"))?;
        self.dev.mem.deregister(lkey).map_err(reg_error)?;
        self.pd_use(pd, -1);
        Ok(Reply::Done)
    }

    fn alloc_mw(&mut self, pd: PdIndex, mw_type: u8) -> Result<Reply, CmdError> {
        self.pd_exists(pd)?;
        let rkey = self.dev.mem.alloc_window(pd, mw_type).map_err(reg_error)?;
        self.pd_use(pd, 1);
        Ok(Reply::Mw { rkey })
    }

    fn dealloc_mw(&mut self, rkey: u32) -> Result<Reply, CmdError> {
        let pd = self.dev.mem.pd_of(rkey).ok_or(CmdError::NotFound("no such MW"))?;
        self.dev.mem.dealloc_window(rkey).map_err(reg_error)?;
        self.pd_use(pd, -1);
        Ok(Reply::Done)
    }

    /// A CQ ring the driver offers (create or resize): a shape within the
    /// device's limits, one CQE per entry.
    fn check_cq_ring(&self, ring: &RingDesc) -> Result<(), CmdError> {
        ring.validate(self.dev.config.max_cqe + 1, CQE_LEN as u32)
            .map_err(|_| CmdError::Invalid("CQ ring shape"))?;
        if ring.stride != CQE_LEN as u32 {
            return Err(CmdError::Invalid("CQ stride must be the CQE size"));
        }
        Ok(())
    }

    fn create_cq(&mut self, ring: RingDesc) -> Result<Reply, CmdError> {
        self.check_cq_ring(&ring)?;
        self.dev
            .cqs
            .insert_with(|_| CqContext::new(ProducerRing::new(ring)))
            .map(|cq| Reply::Index(cq.value()))
            .map_err(|_| CmdError::NoResources("CQ table full"))
    }

    /// rxe's rxe_cq_resize_queue: the CQEs the driver has not consumed move,
    /// in order, to the start of the new ring. The old ring's consumer index
    /// is the driver's (hostile): it is read once and checked, and nothing
    /// changes unless every copy succeeded.
    fn resize_cq(&mut self, cq: CqIndex, ring: RingDesc) -> Result<Reply, CmdError> {
        self.check_cq_ring(&ring)?;
        let host = self.dev.mem.host().clone();
        let ctx = self.dev.cqs.get_mut(cq).ok_or(CmdError::NotFound("no such CQ"))?;
        let old = ctx.ring;
        if old.desc.base == ring.base {
            return Err(CmdError::Invalid("CQ resized onto its own ring"));
        }
        let consumer = host
            .load_acquire_u32(old.desc.base + CONSUMER_OFFSET)
            .map_err(|_| CmdError::Invalid("CQ consumer index unreadable"))?;
        let pending = old.producer.wrapping_sub(consumer);
        if pending > old.desc.entries {
            return Err(CmdError::Invalid("CQ consumer index past its producer index"));
        }
        if pending > ring.entries {
            return Err(CmdError::Invalid("CQ resized below its outstanding CQEs"));
        }
        let mut entry = [0u8; CQE_LEN];
        for i in 0..pending {
            host.read(old.desc.entry_addr(consumer.wrapping_add(i)), &mut entry)
                .and_then(|()| host.write(ring.entry_addr(i), &entry))
                .map_err(|_| CmdError::Invalid("CQ ring memory"))?;
        }
        host.store_release_u32(ring.base + CONSUMER_OFFSET, 0)
            .and_then(|()| host.store_release_u32(ring.base + PRODUCER_OFFSET, pending))
            .map_err(|_| CmdError::Invalid("CQ ring memory"))?;
        ctx.ring = ProducerRing { desc: ring, producer: pending };
        Ok(Reply::Done)
    }

    fn destroy_cq(&mut self, cq: CqIndex) -> Result<Reply, CmdError> {
        let ctx = self.dev.cqs.get(cq).ok_or(CmdError::NotFound("no such CQ"))?;
        if ctx.users > 0 {
            return Err(CmdError::Busy("CQ still used by QPs"));
        }
        self.dev.cqs.remove(cq);
        Ok(Reply::Done)
    }

    fn create_srq(
        &mut self,
        pd: PdIndex,
        ring: RingDesc,
        max_sge: u32,
        limit: u32,
    ) -> Result<Reply, CmdError> {
        self.pd_exists(pd)?;
        if max_sge == 0 || max_sge > self.dev.config.max_srq_sge {
            return Err(CmdError::Invalid("SRQ max_sge"));
        }
        ring.validate(self.dev.config.max_srq_wr, recv_stride(max_sge))
            .map_err(|_| CmdError::Invalid("SRQ ring shape"))?;
        let srq = SrqContext { pd, ring: ConsumerRing::new(ring), max_sge, limit, users: 0 };
        let index = self
            .dev
            .srqs
            .insert_with(|_| srq)
            .map_err(|_| CmdError::NoResources("SRQ table full"))?;
        self.pd_use(pd, 1);
        Ok(Reply::Index(index.value()))
    }

    fn modify_srq(&mut self, srq: SrqIndex, limit: u32) -> Result<Reply, CmdError> {
        let ctx = self.dev.srqs.get_mut(srq).ok_or(CmdError::NotFound("no such SRQ"))?;
        if limit > ctx.ring.desc.entries {
            return Err(CmdError::Invalid("SRQ limit above its size"));
        }
        ctx.limit = limit;
        Ok(Reply::Done)
    }

    fn destroy_srq(&mut self, srq: SrqIndex) -> Result<Reply, CmdError> {
        let ctx = self.dev.srqs.get(srq).ok_or(CmdError::NotFound("no such SRQ"))?;
        if ctx.users > 0 {
            return Err(CmdError::Busy("SRQ still used by QPs"));
        }
        let pd = ctx.pd;
        self.dev.srqs.remove(srq);
        self.pd_use(pd, -1);
        Ok(Reply::Done)
    }

    fn create_ah(&mut self, pd: PdIndex, attr: &AhAttr) -> Result<Reply, CmdError> {
        self.pd_exists(pd)?;
        let path = self.resolve_path(attr)?;
        let index = self
            .dev
            .ahs
            .insert_with(|_| AhContext { pd, path })
            .map_err(|_| CmdError::NoResources("AH table full"))?;
        self.pd_use(pd, 1);
        Ok(Reply::Index(index.value()))
    }

    pub(super) fn pd_exists(&self, pd: PdIndex) -> Result<(), CmdError> {
        self.pds.get(pd).map(|_| ()).ok_or(CmdError::NotFound("no such PD"))
    }

    pub(super) fn pd_use(&mut self, pd: PdIndex, delta: i32) {
        if let Some(ctx) = self.pds.get_mut(pd) {
            ctx.users = ctx.users.saturating_add_signed(delta);
        }
    }

    /// The source and destination IP of an address vector.
    pub(super) fn resolve_path(&self, attr: &AhAttr) -> Result<Path, CmdError> {
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

    fn device_attr(&self) -> DeviceAttr {
        let c = &self.dev.config;
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
            max_mcast_grp: c.max_mcast_grp,
            max_mcast_qp_attach: c.max_mcast_qp_attach,
            max_total_mcast_qp_attach: c.max_total_mcast_qp_attach,
            max_inline_data: c.max_inline_data,
            max_pkeys: 64,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }

    fn node_guid(&self) -> u64 {
        super::node_guid(&self.gids)
    }

    fn port_attr(&self) -> PortAttr {
        PortAttr {
            state: 4,
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.dev.config.active_mtu,
            gid_tbl_len: self.gids.len() as u32,
            max_msg_sz: self.dev.config.max_msg_size,
            pkey_tbl_len: 64,
            link_layer: 2,
        }
    }
}

/// The command error of a registration error.
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

impl Table<AhContext, AhIndex> {
    /// The path of address handle `ah`, if it is one of protection domain
    /// `pd`'s.
    pub(crate) fn path(&self, ah: AhIndex, pd: PdIndex) -> Option<&Path> {
        self.get(ah).filter(|a| a.pd == pd).map(|a| &a.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HcaConfig;
    use std::sync::Arc;
    use uroce_device::command::Gid;
    use uroce_device::cqe::Cqe;
    use uroce_device::mem::{DriverMemory, HostMemory, SimMemory};
    use uroce_device::ring::cq_ring_shape;
    use uroce_device::types::{Qpn, WcOpcode, WcStatus};

    fn ring(host: &SimMemory, cqe: u32) -> RingDesc {
        let shape = cq_ring_shape(cqe);
        RingDesc { base: host.allocate(shape.bytes(), 4096).unwrap(), ..shape }
    }

    #[test]
    fn resize_moves_unconsumed_cqes_and_refuses_hostile_indices() {
        let host = Arc::new(SimMemory::strict(1 << 20));
        let gids = vec![Gid::from_ip(core::net::IpAddr::from([10, 0, 0, 1]))];
        let mut hca = Hca::new(HcaConfig::default(), gids, host.clone()).unwrap();
        let old = ring(&host, 3);
        let Ok(Reply::Index(cq)) = hca.command(Instant::ZERO, Command::CreateCq { ring: old })
        else {
            panic!("CreateCq")
        };
        hca.command(Instant::ZERO, Command::ResizeCq { cq, ring: old }).unwrap_err();
        for id in 0..3u64 {
            let cqe = Cqe::new(id, WcStatus::Success, WcOpcode::Send, Qpn::new(17));
            let ctx = hca.dev.cqs.get_mut(CqIndex(cq)).unwrap();
            assert!(matches!(
                ctx.post(host.as_ref(), &cqe, false),
                crate::cq::PostOutcome::Written { .. }
            ));
        }
        // The driver consumed one.
        host.store_release_u32(old.base + CONSUMER_OFFSET, 1).unwrap();
        // A consumer index past the producer's, or a ring too small: refused.
        let small = ring(&host, 1);
        assert!(hca.command(Instant::ZERO, Command::ResizeCq { cq, ring: small }).is_ok());
        let tiny = RingDesc { entries: 1, ..ring(&host, 1) };
        let now = Instant::ZERO;
        assert!(hca.command(now, Command::ResizeCq { cq, ring: tiny }).is_err());
        host.store_release_u32(small.base + CONSUMER_OFFSET, 9).unwrap();
        assert!(hca.command(now, Command::ResizeCq { cq, ring: ring(&host, 8) }).is_err());
        host.store_release_u32(small.base + CONSUMER_OFFSET, 0).unwrap();
        let big = ring(&host, 8);
        hca.command(now, Command::ResizeCq { cq, ring: big }).unwrap();
        assert_eq!(host.load_acquire_u32(big.base + PRODUCER_OFFSET).unwrap(), 2);
        for (i, id) in [1u64, 2].into_iter().enumerate() {
            let mut bytes = [0u8; CQE_LEN];
            host.read(big.entry_addr(i as u32), &mut bytes).unwrap();
            assert_eq!(Cqe::decode(&bytes).unwrap().wr_id, id);
        }
        assert!(hca.command(now, Command::ResizeCq { cq: cq + 1, ring: ring(&host, 8) }).is_err());
    }

    #[test]
    fn rereg_keeps_the_keys_and_moves_the_pd_use() {
        let host = Arc::new(SimMemory::strict(1 << 20));
        let gids = vec![Gid::from_ip(core::net::IpAddr::from([10, 0, 0, 1]))];
        let mut hca = Hca::new(HcaConfig::default(), gids, host.clone()).unwrap();
        let now = Instant::ZERO;
        let mut pd = || match hca.command(now, Command::AllocPd) {
            Ok(Reply::Index(pd)) => pd,
            other => panic!("AllocPd: {other:?}"),
        };
        let (old, new) = (pd(), pd());
        let buf = host.allocate(4096, 4096).unwrap();
        let reg = Command::RegMr {
            pd: old,
            addr: buf,
            length: 4096,
            iova: buf,
            access: Access::LOCAL_WRITE,
        };
        let Ok(Reply::Mr { lkey, .. }) = hca.command(now, reg) else { panic!("RegMr") };
        let rereg = |pd, access| Command::ReregMr { lkey, pd, translation: None, access };
        assert_eq!(
            hca.command(now, rereg(None, None)),
            Err(CmdError::Invalid("a re-registration that changes nothing"))
        );
        assert!(matches!(hca.command(now, rereg(Some(99), None)), Err(CmdError::NotFound(_))));
        let bad = Some(Access::REMOTE_WRITE);
        assert!(matches!(hca.command(now, rereg(None, bad)), Err(CmdError::Invalid(_))));
        assert_eq!(hca.command(now, rereg(Some(new), None)), Ok(Reply::Mr { lkey, rkey: lkey }));
        // The region now keeps the new PD in use, not the old one.
        let busy = hca.command(now, Command::DeallocPd { pd: new });
        assert!(matches!(busy, Err(CmdError::Busy(_))));
        assert_eq!(hca.command(now, Command::DeallocPd { pd: old }), Ok(Reply::Done));
        assert_eq!(hca.command(now, Command::DeregMr { lkey }), Ok(Reply::Done));
        assert_eq!(hca.command(now, Command::DeallocPd { pd: new }), Ok(Reply::Done));
    }
}
