//! The device's transmit budget: all RC QPs together may have
//! `HcaConfig::max_device_unacked_psns` PSNs unacknowledged. Past it a QP
//! starts no new WQE (a started one finishes; retransmissions and
//! responses always go) and waits in `Device::budget_waiters` until ACKs
//! free room (docs/hca.md, §2.3).

use super::{raise_scheduled_flag, schedule_qp, Device, Hca, QpStep};
use crate::qp::QpContext;
use uroce_device::types::QpType;

impl Device {
    /// Whether the device's unacknowledged PSNs leave room for a new WQE.
    pub(crate) fn budget_left(&self) -> bool {
        self.unacked_psns < self.config.max_device_unacked_psns
    }

    /// Whether `qp`'s next packet must wait for the budget: it would start
    /// an RC WQE while the budget is spent.
    fn holds_back(&self, qp: &QpContext) -> bool {
        qp.qp_type == QpType::Rc && !self.budget_left() && qp.between_wqes()
    }
}

/// Every step ends by bringing its QP's share of the device's
/// unacknowledged PSNs up to date, whatever it did (sent, was ACKed, went
/// back, changed state): one place, so that no path can leak budget.
impl Drop for QpStep<'_> {
    fn drop(&mut self) {
        let qp = &mut *self.qp;
        let now = qp.unacked_psns();
        if now != qp.charged_psns {
            let total = self.dev.unacked_psns.saturating_add(now);
            self.dev.unacked_psns = total.saturating_sub(qp.charged_psns);
            qp.charged_psns = now;
        }
    }
}

impl QpStep<'_> {
    /// Whether the current (fetched) WQE would start an RC request while
    /// the budget is spent: then the QP waits (`Device::budget_blocked`
    /// tells `Hca::poll_transmit`).
    pub(crate) fn waits_for_budget(&mut self) -> bool {
        let waits = self.dev.holds_back(self.qp);
        self.dev.budget_blocked |= waits;
        waits
    }

    /// A send doorbell of an RC QP that is not sending while the budget is
    /// spent: stepped now, it would only find that out. It joins the
    /// waiters with its flag up (the driver need not ring again) and is
    /// stepped when the budget has room.
    pub(crate) fn waits_at_doorbell(&mut self) -> bool {
        let qp = &*self.qp;
        if qp.scheduled || !qp.can_send() || !self.dev.holds_back(qp) {
            return false;
        }
        raise_scheduled_flag(&self.dev.mem, qp);
        self.wait_for_budget();
        true
    }

    /// Puts this QP among the budget's waiters (once).
    pub(crate) fn wait_for_budget(&mut self) {
        if !std::mem::replace(&mut self.qp.waiting_for_budget, true) {
            self.dev.budget_waiters.push_back(self.index);
        }
    }
}

impl Hca {
    /// Schedules the QPs that wait for the budget again, in order: one per
    /// turn's worth of PSNs it has room for (a QP let go into a budget it
    /// would spend after one packet is stepped twice for nothing), at least
    /// one while there is any room. One that still finds no room waits
    /// again, at the back.
    pub(super) fn release_budget_waiters(&mut self) {
        let room = self.dev.config.max_device_unacked_psns.saturating_sub(self.dev.unacked_psns);
        let per_qp = self.dev.config.max_burst_packets.max(1);
        let count = (room.div_ceil(per_qp) as usize).min(self.dev.budget_waiters.len());
        for _ in 0..count {
            let Some(index) = self.dev.budget_waiters.pop_front() else { break };
            // A QP destroyed while waiting has left its slot (or a new QP
            // has it: scheduling that one only costs it a look).
            let Some(qp) = self.qps.get_mut(index) else { continue };
            qp.waiting_for_budget = false;
            schedule_qp(&mut self.dev.sched, &self.dev.mem, index, qp);
        }
    }
}
