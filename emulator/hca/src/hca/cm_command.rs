//! The CM's commands (`Command::Cm*`): the device interface's plain values
//! turned into calls on the CM engine QP1 carries (`crate::gsi`), and the
//! engine's events turned back into plain [`CmEvent`]s. The device crate
//! knows nothing of `uroce-cm`; this file is the only place they meet.

use super::Hca;
use crate::time::Instant;
use core::net::IpAddr;
use uroce_cm::{
    AcceptParams, CmError, ConnectParams, DisconnectCause, Event, Peer, SidrParams,
    SidrReplyParams, TimedOut,
};
use uroce_device::cm::{
    CmAcceptParams, CmConnectParams, CmDisconnectCause, CmEvent, CmEventKind, CmId, CmTimedOut,
};
use uroce_device::command::{CmdError, Command, Gid, Reply};
use uroce_wire::mad::{self, rej::RejectReason, sidr::SidrStatus, CmMessage, CommId, ServiceId};
use uroce_wire::{Psn, Qkey};

impl Hca {
    /// Runs a `Cm*` command. A CM ID the engine does not know is
    /// `NotFound`; a request its state does not allow is `Invalid`.
    pub(super) fn cm_command(&mut self, now: Instant, command: Command) -> Result<Reply, CmdError> {
        let now_ns = now.as_nanos();
        if let Command::CmConnect { params, private_data } = &command {
            let (params, local) = self.connect_params(params)?;
            let id = self.gsi.cm.connect(now_ns, &params, private_data).map_err(cm_error)?;
            self.gsi.set_route(Gid(params.remote_gid.0), local);
            return Ok(Reply::CmId { id: id.0 .0 });
        }
        if let Command::CmPollEvent = command {
            let event = self.gsi.cm.poll_event().map(cm_event);
            // The driver took the last one: the next event that comes is
            // announced again, even before a runtime step sees the queue
            // empty (else it could wait unannounced behind this one).
            if !self.gsi.cm.has_event() {
                self.gsi.events_notified = false;
            }
            return Ok(Reply::CmEvent(event));
        }
        let (sidr_timeout_ms, max_retries) = self.cm_timing();
        let cm = &mut self.gsi.cm;
        let result = match command {
            Command::CmListen { service_id } => cm.listen(ServiceId(service_id)),
            Command::CmUnlisten { service_id } => cm.unlisten(ServiceId(service_id)),
            Command::CmAccept { id, params, private_data } => {
                cm.accept(now_ns, engine_id(id), &accept_params(&params), &private_data)
            }
            Command::CmReject { id, reason, private_data } => {
                cm.reject_with(now_ns, engine_id(id), RejectReason::from(reason), &private_data)
            }
            Command::CmReadyToUse { id, private_data } => {
                cm.ready_to_use(now_ns, engine_id(id), &private_data)
            }
            Command::CmMra { id, service_timeout } => {
                // The device's delay flag is the engine's (ib_cm's).
                const _: () = assert!(uroce_device::cm::CM_MRA_DELAY == uroce_cm::MRA_DELAY);
                cm.mra(now_ns, engine_id(id), service_timeout)
            }
            Command::CmEstablished { id } => cm.established(now_ns, engine_id(id)),
            Command::CmDisconnect { id, private_data } => {
                cm.disconnect(now_ns, engine_id(id), &private_data)
            }
            Command::CmDestroy { id } => cm.destroy(now_ns, engine_id(id)),
            Command::CmSidrRequest { params, private_data } => {
                let peer = Peer { gid: mad::Gid(params.remote_gid.0), pkey_index: 0 };
                if params.pkey_index != 0 {
                    return Err(CmdError::Invalid("pkey_index must be 0 (one partition)"));
                }
                let params = SidrParams {
                    peer,
                    pkey: params.pkey,
                    service_id: ServiceId(params.service_id),
                    // The device's, not the command's (`HcaConfig`).
                    timeout_ms: sidr_timeout_ms,
                    max_retries,
                };
                let id = cm.sidr_request(now_ns, &params, &private_data).map_err(cm_error)?;
                return Ok(Reply::CmId { id: id.0 .0 });
            }
            Command::CmSidrReply { id, params, private_data } => {
                let params = SidrReplyParams {
                    status: SidrStatus::from(params.status),
                    qpn: params.qpn,
                    qkey: Qkey(params.qkey),
                };
                cm.sidr_reply(now_ns, engine_id(id), &params, &private_data)
            }
            _ => return Err(CmdError::Invalid("not a CM command")),
        };
        result.map(|()| Reply::Done).map_err(cm_error)
    }

    /// Whether CM events wait for `CmPollEvent`.
    pub fn has_cm_events(&self) -> bool {
        self.gsi.cm.has_event()
    }

    /// The CM engine's counters (received MADs by fate, retries,
    /// timeouts), for dumps and tests.
    pub fn cm_counters(&self) -> uroce_cm::Counters {
        *self.gsi.cm.counters()
    }

    /// The device's SIDR_REQ wait and CM retries: rdma_cm's
    /// `1 << (CMA_CM_RESPONSE_TIMEOUT - 8)` ms (at least 1 ms, as the CM
    /// rounds a response timeout) and `CMA_MAX_CM_RETRIES`, from the
    /// configuration.
    fn cm_timing(&self) -> (u64, u8) {
        (
            uroce_cm::iba_time_to_ms(self.dev.config.cm_response_timeout),
            self.dev.config.cm_max_retries,
        )
    }

    /// The engine's parameters of a connect (the local GID from the GID
    /// table, of the peer's IP version), and the local address its MADs
    /// leave from.
    fn connect_params(&self, p: &CmConnectParams) -> Result<(ConnectParams, IpAddr), CmdError> {
        let local = self
            .gids
            .get(usize::from(p.sgid_index))
            .ok_or(CmdError::Invalid("sgid_index out of range"))?;
        if local.to_ip().is_ipv4() != p.remote_gid.to_ip().is_ipv4() {
            return Err(CmdError::Invalid("source and destination GIDs of different IP versions"));
        }
        if p.pkey_index != 0 {
            return Err(CmdError::Invalid("pkey_index must be 0 (one partition)"));
        }
        if !(1..=5).contains(&p.path_mtu) {
            return Err(CmdError::Invalid("path MTU code must be 1 (256) to 5 (4096)"));
        }
        let params = ConnectParams {
            local_gid: mad::Gid(local.0),
            remote_gid: mad::Gid(p.remote_gid.0),
            pkey_index: p.pkey_index,
            pkey: p.pkey,
            service_id: ServiceId(p.service_id),
            qpn: p.qpn,
            starting_psn: Psn::new(p.starting_psn),
            transport: p.transport,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            path_mtu: p.path_mtu,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            packet_life_time: p.packet_life_time,
            // The device's CM timing, not the command's (`HcaConfig`).
            local_cm_response_timeout: self.dev.config.cm_response_timeout,
            remote_cm_response_timeout: self.dev.config.cm_response_timeout,
            max_cm_retries: self.dev.config.cm_max_retries,
            flow_label: p.flow_label,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: p.sl,
            srq: p.srq,
        };
        Ok((params, local.to_ip()))
    }
}

fn engine_id(id: CmId) -> uroce_cm::CmId {
    uroce_cm::CmId(CommId(id))
}

fn accept_params(p: &CmAcceptParams) -> AcceptParams {
    AcceptParams {
        qpn: p.qpn,
        starting_psn: Psn::new(p.starting_psn),
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
        flow_control: p.flow_control,
    }
}

/// The command error of an engine error.
fn cm_error(e: CmError) -> CmdError {
    match e {
        CmError::UnknownId => CmdError::NotFound("no such CM ID"),
        CmError::WrongState => CmdError::Invalid("CM ID in the wrong state for this"),
        CmError::PrivateDataTooLong => CmdError::Invalid("private data too long"),
        CmError::ServiceIdInUse => CmdError::Busy("service ID already listened on"),
        CmError::NotListening => CmdError::NotFound("service ID not listened on"),
        CmError::TooManyIds => CmdError::NoResources("CM ID table full"),
        CmError::InvalidParameter => CmdError::Invalid("CM parameter out of range"),
    }
}

/// The class data of a message: its 232 bytes as they go on the wire.
fn message_bytes(message: CmMessage) -> Vec<u8> {
    let mut buf = [0u8; mad::MAD_LEN];
    let mut packet = mad::Packet::new_unchecked(&mut buf[..]);
    // A 256-byte buffer always holds every message.
    let _ = message.emit(&mut packet);
    buf[mad::HEADER_LEN..].to_vec()
}

fn gid(g: mad::Gid) -> uroce_device::command::Gid {
    uroce_device::command::Gid(g.0)
}

/// The device interface's event of an engine event.
fn cm_event(event: Event) -> CmEvent {
    let id = event.id().0 .0;
    let kind = match event {
        Event::ConnectRequest { peer, req, .. } => CmEventKind::ConnectRequest {
            peer: gid(peer.gid),
            pkey_index: peer.pkey_index,
            req: message_bytes(CmMessage::Req(*req)),
        },
        Event::ConnectReply { rep, .. } => {
            CmEventKind::ConnectReply { rep: message_bytes(CmMessage::Rep(*rep)) }
        }
        Event::Established { .. } => CmEventKind::Established,
        Event::Rejected { rej, .. } => CmEventKind::Rejected {
            reason: u16::from(rej.reason),
            rej: message_bytes(CmMessage::Rej(*rej)),
        },
        Event::Unreachable { stage, .. } => CmEventKind::Unreachable {
            stage: match stage {
                TimedOut::Req => CmTimedOut::Req,
                TimedOut::Rep => CmTimedOut::Rep,
            },
        },
        Event::Disconnected { cause, private_data, .. } => CmEventKind::Disconnected {
            cause: match cause {
                DisconnectCause::DreqReceived => CmDisconnectCause::DreqReceived,
                DisconnectCause::DrepReceived => CmDisconnectCause::DrepReceived,
                DisconnectCause::DreqTimedOut => CmDisconnectCause::DreqTimedOut,
            },
            private_data,
        },
        Event::TimewaitExit { .. } => CmEventKind::TimewaitExit,
        Event::SidrRequest { peer, req, .. } => CmEventKind::SidrRequest {
            peer: gid(peer.gid),
            pkey_index: peer.pkey_index,
            req: message_bytes(CmMessage::SidrReq(*req)),
        },
        Event::SidrReply { rep, .. } => {
            CmEventKind::SidrReply { rep: message_bytes(CmMessage::SidrRep(*rep)) }
        }
        Event::SidrUnreachable { .. } => CmEventKind::SidrUnreachable,
    };
    CmEvent { id, kind }
}
