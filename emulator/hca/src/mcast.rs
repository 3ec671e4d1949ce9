//! Multicast groups (IBA multicast on RoCEv2, rxe's `rxe_mcast.c`): which
//! UD QPs are attached to which group GID, and the groups the runtime must
//! join on the network.
//!
//! A UD packet to QPN 0xFFFFFF whose destination IP is a group's address
//! reaches every QP attached to that group on this device, each with its
//! own Q_Key check, as `rxe_rcv_mcast_pkt` does (`rx.rs`). Sending to a
//! group needs nothing here: an address handle whose GID is the group's
//! makes packets to the group's IP address, and the runtime carries them.
//! The runtime learns the device's first attachment to a group, and its
//! last detachment, from [`Hca::poll_mcast_change`]: a device on kernel
//! UDP joins the group's address on the network then (`docs/runtime.md`).

use crate::config::HcaConfig;
use crate::hca::Hca;
use std::collections::{BTreeMap, VecDeque};
use uroce_device::command::{CmdError, Gid, Reply};
use uroce_device::types::{QpType, Qpn};

/// A change in the groups the device belongs to, for the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastChange {
    /// The group's first QP attached: receive its packets from now on.
    Joined(Gid),
    /// The group's last QP detached (or was destroyed): its packets are
    /// no longer wanted.
    Left(Gid),
}

impl McastChange {
    /// The group.
    pub fn gid(self) -> Gid {
        match self {
            McastChange::Joined(gid) | McastChange::Left(gid) => gid,
        }
    }
}

/// The multicast group table (rxe's `mc_grp_pool` and `mc_elem_pool`).
#[derive(Debug, Default)]
pub(crate) struct McastGroups {
    /// Each group with its attached QPs, in attach order (a `BTreeMap`:
    /// iteration order never depends on hashing).
    groups: BTreeMap<Gid, Vec<Qpn>>,
    /// Attachments over all groups.
    attachments: u32,
    /// Changes the runtime has not taken. At most one per group: a change
    /// that undoes a waiting one cancels it.
    changes: VecDeque<McastChange>,
}

impl McastGroups {
    /// The QPs attached to the group `gid` (none when it has no QP).
    pub(crate) fn members(&self, gid: &Gid) -> &[Qpn] {
        self.groups.get(gid).map_or(&[], Vec::as_slice)
    }

    /// Attaches `qpn` to `gid` within `config`'s limits; attaching again
    /// is harmless.
    fn attach(&mut self, config: &HcaConfig, qpn: Qpn, gid: Gid) -> Result<(), CmdError> {
        if config.max_mcast_grp == 0 || config.max_mcast_qp_attach == 0 {
            // rxe: -EINVAL when max_mcast_qp_attach is 0.
            return Err(CmdError::Invalid("the device is configured without multicast"));
        }
        let is_new_group = !self.groups.contains_key(&gid);
        if is_new_group && self.groups.len() >= config.max_mcast_grp as usize {
            return Err(CmdError::NoResources("multicast group table full"));
        }
        let members = self.members(&gid);
        if members.contains(&qpn) {
            return Ok(());
        }
        if members.len() >= config.max_mcast_qp_attach as usize {
            return Err(CmdError::NoResources("multicast group has max_mcast_qp_attach QPs"));
        }
        if self.attachments >= config.max_total_mcast_qp_attach {
            return Err(CmdError::NoResources("max_total_mcast_qp_attach reached"));
        }
        self.groups.entry(gid).or_default().push(qpn);
        self.attachments += 1;
        if is_new_group {
            self.changed(McastChange::Joined(gid));
        }
        Ok(())
    }

    /// Detaches `qpn` from `gid`; whether it was attached.
    fn detach(&mut self, qpn: Qpn, gid: Gid) -> bool {
        let Some(members) = self.groups.get_mut(&gid) else { return false };
        let Some(at) = members.iter().position(|&q| q == qpn) else { return false };
        members.remove(at);
        self.attachments -= 1;
        if members.is_empty() {
            self.groups.remove(&gid);
            self.changed(McastChange::Left(gid));
        }
        true
    }

    /// Detaches `qpn` from every group (the QP is being destroyed).
    fn detach_all(&mut self, qpn: Qpn) {
        let groups: Vec<Gid> = self
            .groups
            .iter()
            .filter(|(_, members)| members.contains(&qpn))
            .map(|(gid, _)| *gid)
            .collect();
        for gid in groups {
            self.detach(qpn, gid);
        }
    }

    /// Queues `change` for the runtime, or cancels the waiting change it
    /// undoes (a group joined and left before the runtime looked was never
    /// joined for it).
    fn changed(&mut self, change: McastChange) {
        let gid = change.gid();
        match self.changes.iter().position(|c| c.gid() == gid) {
            Some(at) => {
                self.changes.remove(at);
            }
            None => self.changes.push_back(change),
        }
    }
}

impl Hca {
    /// `ibv_attach_mcast`: the QP must be UD and the GID a multicast one
    /// (as `ib_attach_mcast` checks before rxe's `rxe_attach_mcast`).
    pub(crate) fn attach_mcast(&mut self, qpn: Qpn, gid: Gid) -> Result<Reply, CmdError> {
        let qp = self.qp(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        if qp.qp_type != QpType::Ud {
            return Err(CmdError::Invalid("only a UD QP can be attached to a multicast group"));
        }
        if !gid.is_multicast() {
            return Err(CmdError::Invalid("not a multicast GID"));
        }
        self.mcast.attach(&self.dev.config, qpn, gid)?;
        Ok(Reply::Done)
    }

    /// `ibv_detach_mcast`: refused for a QP not attached to the group
    /// (rxe's -EINVAL).
    pub(crate) fn detach_mcast(&mut self, qpn: Qpn, gid: Gid) -> Result<Reply, CmdError> {
        self.qp(qpn).ok_or(CmdError::NotFound("no such QP"))?;
        if !self.mcast.detach(qpn, gid) {
            return Err(CmdError::Invalid("the QP is not attached to that multicast group"));
        }
        Ok(Reply::Done)
    }

    /// A QP being destroyed leaves every group (rxe's
    /// `rxe_drop_all_mcast_groups`).
    pub(crate) fn detach_mcast_all(&mut self, qpn: Qpn) {
        self.mcast.detach_all(qpn);
    }

    /// The next change in the groups this device belongs to: a group's
    /// first QP attached ([`McastChange::Joined`]), or its last one left
    /// ([`McastChange::Left`]). A runtime on a real network joins or leaves
    /// the group's address there; the simulated fabric, which carries a
    /// multicast packet to every node, has no need to.
    pub fn poll_mcast_change(&mut self) -> Option<McastChange> {
        self.mcast.changes.pop_front()
    }

    /// The groups with QPs attached, in GID order, each with its QPs.
    pub fn mcast_groups(&self) -> impl Iterator<Item = (Gid, &[Qpn])> + '_ {
        self.mcast.groups.iter().map(|(gid, qps)| (*gid, qps.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(last: u8) -> Gid {
        Gid::from_ip(core::net::IpAddr::from([230, 88, 0, last]))
    }

    fn small() -> HcaConfig {
        HcaConfig {
            max_mcast_grp: 2,
            max_mcast_qp_attach: 2,
            max_total_mcast_qp_attach: 3,
            ..HcaConfig::default()
        }
    }

    #[test]
    fn attach_is_idempotent_and_bounded_by_the_three_limits() {
        let (config, mut t) = (small(), McastGroups::default());
        let (a, b, c) = (Qpn::new(16), Qpn::new(17), Qpn::new(18));
        t.attach(&config, a, group(1)).unwrap();
        t.attach(&config, a, group(1)).unwrap();
        assert_eq!(t.members(&group(1)), [a], "attaching twice attaches once");
        t.attach(&config, b, group(1)).unwrap();
        let full = t.attach(&config, c, group(1));
        assert!(matches!(full, Err(CmdError::NoResources(_))), "max_mcast_qp_attach");
        t.attach(&config, c, group(2)).unwrap();
        let total = t.attach(&config, a, group(2));
        assert!(matches!(total, Err(CmdError::NoResources(_))), "max_total_mcast_qp_attach");
        assert!(t.detach(c, group(2)));
        t.attach(&config, a, group(2)).unwrap();
        let groups = t.attach(&config, a, group(3));
        assert!(matches!(groups, Err(CmdError::NoResources(_))), "max_mcast_grp");
        assert!(!t.detach(c, group(1)), "not attached");
        assert!(!t.detach(a, group(9)), "no such group");
        let none = HcaConfig { max_mcast_grp: 0, ..small() };
        let refused = McastGroups::default().attach(&none, a, group(1));
        assert!(matches!(refused, Err(CmdError::Invalid(_))), "a device without multicast");
    }

    #[test]
    fn the_runtime_hears_of_first_joins_and_last_leaves_only() {
        let (config, mut t) = (HcaConfig::default(), McastGroups::default());
        let (a, b) = (Qpn::new(16), Qpn::new(17));
        t.attach(&config, a, group(1)).unwrap();
        t.attach(&config, b, group(1)).unwrap();
        t.attach(&config, a, group(2)).unwrap();
        assert_eq!(
            t.changes.drain(..).collect::<Vec<_>>(),
            [McastChange::Joined(group(1)), McastChange::Joined(group(2))]
        );
        assert!(t.detach(a, group(1)));
        assert!(t.changes.is_empty(), "b is still attached");
        t.detach_all(b);
        t.detach_all(a);
        assert_eq!(
            t.changes.drain(..).collect::<Vec<_>>(),
            [McastChange::Left(group(1)), McastChange::Left(group(2))]
        );
        assert_eq!(t.attachments, 0);
        // Joined and left before the runtime looked: nothing to tell.
        t.attach(&config, a, group(3)).unwrap();
        assert!(t.detach(a, group(3)));
        assert!(t.changes.is_empty());
    }
}
