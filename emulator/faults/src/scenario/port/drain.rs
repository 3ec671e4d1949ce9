//! The [`Port`](super::Port)'s drains and queries, and the bookkeeping behind them.

use super::*;

impl Port {
    /// The next held packet whose turn came (enough packets of its flow
    /// passed it, or it was held `max_hold_us`), in hold order.
    pub fn take_released(&mut self, now_ns: u64) -> Option<Held> {
        self.release(now_ns);
        self.released.pop_front()
    }

    pub(super) fn release(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.held.len() {
            let h = &self.held[i];
            if h.passed >= h.behind || now_ns >= h.due_ns {
                if let Some(h) = self.held.remove(i) {
                    self.released.push_back(h.held);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Fires the next timed rule that is due (a window and no match key:
    /// once, at `after_ms`); `None` when none is.
    pub fn poll_timed(&mut self, now_ns: u64) -> Option<TimedFiring> {
        let i = self.rules.iter().position(|r| {
            r.here
                && r.spec.timed
                && !r.timed_done
                && r.spec.window.after_ns.is_some_and(|a| now_ns >= a)
        })?;
        self.rules[i].timed_done = true;
        let action = self.rules[i].spec.action;
        let mut note = None;
        match action {
            ScenarioAction::Link(link) => self.apply_link(now_ns, link, None),
            ScenarioAction::Device(spec) => {
                let target = if spec.target == Target::Matched { Target::All } else { spec.target };
                note = self.queue_device(now_ns, i, spec.kind, target, None, action);
            }
            ScenarioAction::Packet(_) => {}
        }
        let run = &mut self.rules[i];
        run.matches += 1;
        run.hits += 1;
        let firing = Firing {
            at_ns: now_ns,
            rule: i,
            rule_name: run.spec.name.clone(),
            hit: run.hits,
            action,
            packet: None,
            note,
        };
        self.record(firing);
        Some(TimedFiring { rule: i, action })
    }

    /// When the port next needs [`Port::poll_timed`] or
    /// [`Port::take_released`]: the earliest timed rule not yet fired and
    /// the earliest hold's `max_hold_us`.
    pub fn next_deadline(&self) -> Option<u64> {
        let timed = self
            .rules
            .iter()
            .filter(|r| r.here && r.spec.timed && !r.timed_done)
            .filter_map(|r| r.spec.window.after_ns);
        let holds = self.held.iter().map(|h| h.due_ns);
        timed.chain(holds).min()
    }

    /// The next device fault to apply, in the order decided.
    pub fn poll_device_action(&mut self) -> Option<DeviceAction> {
        self.device.pop_front()
    }

    /// The firings logged since the last call, in order.
    pub fn take_firings(&mut self) -> impl Iterator<Item = Firing> + '_ {
        self.log.drain(..)
    }

    /// Per rule: matched, fired; and the port's counts.
    pub fn summary(&self) -> PortSummary {
        let mut s = self.summary.clone();
        s.rules = self
            .rules
            .iter()
            .map(|r| RuleSummary {
                name: r.spec.name.clone(),
                here: r.here,
                scope: r.spec.scope.clone(),
                matched: r.matches,
                fired: r.hits,
            })
            .collect();
        s
    }

    /// The scenario's name.
    pub fn scenario_name(&self) -> &str {
        &self.scenario
    }

    /// Whether the link is down now.
    pub fn link_down(&self, now_ns: u64) -> bool {
        self.link_down_until.is_some_and(|u| now_ns < u)
    }

    /// Whether `peer` is cut off now.
    pub fn partitioned(&self, now_ns: u64, peer: IpAddr) -> bool {
        self.partitions.get(&peer).is_some_and(|&u| now_ns < u)
    }

    pub(super) fn apply_link(
        &mut self,
        now_ns: u64,
        link: LinkAction,
        packet_peer: Option<IpAddr>,
    ) {
        let until = |for_ns: Option<u64>| for_ns.map_or(u64::MAX, |d| now_ns.saturating_add(d));
        match link {
            LinkAction::Down { for_ns } => self.link_down_until = Some(until(for_ns)),
            LinkAction::Up => self.link_down_until = None,
            LinkAction::Partition { for_ns, peer } => {
                self.partitions.retain(|_, &mut u| now_ns < u);
                if let Some(peer) = peer.or(packet_peer) {
                    self.partitions.insert(peer, until(for_ns));
                }
            }
        }
    }

    pub(super) fn queue_device(
        &mut self,
        now_ns: u64,
        rule: usize,
        kind: DeviceActionKind,
        target: Target,
        matched: Option<Qpn>,
        action: ScenarioAction,
    ) -> Option<&'static str> {
        let ScenarioAction::Device(spec) = action else { return None };
        let qpn = match target {
            Target::All => None,
            Target::Matched => match matched {
                Some(q) => Some(q),
                None => return Some("no QP to target: not applied"),
            },
            Target::Qp(k) => match self.flows.qpn_of(k) {
                Some(q) => Some(q),
                None => return Some("target QP not seen yet: not applied"),
            },
        };
        if self.device.len() >= MAX_DEVICE_ACTIONS {
            return Some("device action queue full: not applied");
        }
        self.summary.device_actions += 1;
        self.device.push_back(DeviceAction {
            kind,
            qpn,
            count: spec.count,
            for_ns: spec.for_ns,
            exit: spec.exit,
            at_ns: now_ns,
            rule,
        });
        None
    }

    pub(super) fn record(&mut self, firing: Firing) {
        if self.log.len() >= MAX_LOG {
            self.summary.firings_lost += 1;
        } else {
            self.log.push_back(firing);
        }
    }
}
