//! The scenario's ingress and egress: packets through the scenario's port
//! (`scenario.rs`) on their way in and out, and the scenario's timed work.

use super::datapath::{leaving_of, Io};
use super::progress::Runtime;
use super::scenario::{self, ScenarioPort};
use super::transport::Leaving;
use super::UdpStats;
use uroce_faults::scenario::Dir;
use uroce_hca::endpoint::Endpoint;
use uroce_hca::time::Instant;
use uroce_hca::Hca;
use uroce_wire::Qpn;

impl Runtime {
    /// Passes one outgoing packet through the scenario's port, then sends
    /// (or holds, or drops) it as the verdict says; device actions it
    /// triggered go to the HCA, reorder holds it released follow it.
    pub(super) fn dispatch_scenario(
        &self,
        io: &mut Io,
        hca: &mut Hca,
        now_ns: u64,
        local_qpn: Option<Qpn>,
        packet: &[u8],
        leaving: Leaving,
    ) {
        let Some(sp) = io.scenario.as_mut() else { return };
        let verdict = sp.port.on_packet(now_ns, Dir::Out, local_qpn, packet);
        let firings = sp.log_firings(now_ns);
        let die = sp.apply_device_actions(hca, now_ns);
        match verdict.dropped {
            Some(cause) => {
                io.stats.faults_lost += 1;
                if let Some(capture) = io.capture.as_mut() {
                    let comment = scenario::dropped_comment(cause, firings.as_deref());
                    let to = leaving.destination;
                    capture.packet(&mut io.stats, self.addr, to, packet, Some(&comment));
                }
            }
            None => {
                let mut comment = firings;
                if verdict.held {
                    if let (Some(sp), Some(c)) = (io.scenario.as_mut(), comment.take()) {
                        sp.hold_comment(packet, c);
                    }
                }
                if verdict.copies[1].is_some() || verdict.extra > 0 {
                    io.stats.faults_duplicated += 1;
                }
                for copy in verdict.copies.iter().flatten() {
                    self.send_copy(io, now_ns, packet, copy, 0, leaving, comment.take());
                }
                if let Some(first) = verdict.copies[0] {
                    for i in 1..=u64::from(verdict.extra) {
                        let after = i.saturating_mul(verdict.extra_gap_ns);
                        self.send_copy(io, now_ns, packet, &first, after, leaving, None);
                    }
                }
            }
        }
        if let Some(sp) = io.scenario.as_mut() {
            scenario::drain_released(sp, hca, now_ns);
        }
        self.send_released(io, now_ns);
        if die {
            if let Some(sp) = io.scenario.as_mut() {
                scenario::die(sp, &mut io.capture, now_ns);
            }
        }
    }

    /// Sends the outgoing packets reorder holds released.
    fn send_released(&self, io: &mut Io, now_ns: u64) {
        while let Some(held) = io.scenario.as_mut().and_then(|sp| sp.out_ready.pop_front()) {
            let Some(leaving) = leaving_of(&held.packet) else {
                io.stats.tx_errors += 1;
                continue;
            };
            let mut comment =
                io.scenario.as_mut().and_then(|sp| sp.take_held_comment(&held.packet));
            for copy in held.copies.iter().flatten() {
                self.send_copy(io, now_ns, &held.packet, copy, 0, leaving, comment.take());
            }
        }
    }

    /// The scenario's work that comes with time, not with a packet: timed
    /// rules (and the device actions they decide), delayed incoming
    /// copies, reorder holds whose `max_hold_us` passed.
    pub(super) fn scenario_tick(&self, io: &mut Io, hca: &mut Hca, now_ns: u64) {
        let Some(sp) = io.scenario.as_mut() else { return };
        while sp.port.poll_timed(now_ns).is_some() {}
        let _ = sp.log_firings(now_ns);
        let die = sp.apply_device_actions(hca, now_ns);
        if die {
            scenario::die(sp, &mut io.capture, now_ns);
        }
        let now = Instant::from_nanos(now_ns);
        while let Some(packet) = sp.due_in(now_ns) {
            hca.receive(now, &packet);
        }
        scenario::drain_released(sp, hca, now_ns);
        self.send_released(io, now_ns);
    }
}

/// Passes one received RoCE packet through the scenario's port: device
/// actions it triggered go to the HCA first, then its copies (now, or
/// queued for their delay), then the reorder holds it released. Returns
/// the capture comment and whether the process must die (`crash`).
pub(super) fn scenario_ingress(
    sp: &mut ScenarioPort,
    hca: &mut Hca,
    now_ns: u64,
    stats: &mut UdpStats,
    packet: &[u8],
) -> (Option<String>, bool) {
    let verdict = sp.port.on_packet(now_ns, Dir::In, None, packet);
    let firings = sp.log_firings(now_ns);
    let die = sp.apply_device_actions(hca, now_ns);
    let comment = match verdict.dropped {
        Some(cause) => {
            stats.faults_lost += 1;
            Some(scenario::dropped_comment(cause, firings.as_deref()))
        }
        None => {
            if verdict.copies[1].is_some() || verdict.extra > 0 {
                stats.faults_duplicated += 1;
            }
            for copy in verdict.copies.iter().flatten() {
                if copy.flip_bit.is_some() {
                    stats.faults_corrupted += 1;
                }
                if copy.delay_ns > 0 {
                    stats.faults_delayed += 1;
                }
                scenario::receive_copy(sp, hca, now_ns, packet, copy, 0);
            }
            if let Some(first) = verdict.copies[0] {
                for i in 1..=u64::from(verdict.extra) {
                    let after = i.saturating_mul(verdict.extra_gap_ns);
                    scenario::receive_copy(sp, hca, now_ns, packet, &first, after);
                }
            }
            firings
        }
    };
    scenario::drain_released(sp, hca, now_ns);
    (comment, die)
}
