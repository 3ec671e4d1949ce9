//! What the engine counts: messages in and out, and every message it
//! dropped, by why.

/// The engine's counters. Each received MAD lands in exactly one of
/// `rx_accepted`, `rx_duplicates` or one of the `drop_*` counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// MADs handed to [`crate::Cm::receive`].
    pub rx_mads: u64,
    /// Received messages that moved a state machine or raised an event.
    pub rx_accepted: u64,
    /// Duplicates of a message already acted on (some answered again, as
    /// Linux answers them: MRA, RTU, DREP, REJ stale connection).
    pub rx_duplicates: u64,
    /// Not a 256-byte CM class 2 MAD with a known format.
    pub drop_malformed: u64,
    /// A CM attribute or method not supported (LAP, APR, ClassPortInfo...).
    pub drop_unsupported: u64,
    /// No CM ID matches the message's comm IDs.
    pub drop_unknown_id: u64,
    /// A CM ID matches, but the message came from another GID.
    pub drop_wrong_peer: u64,
    /// A CM ID matches, but its state does not expect this message.
    pub drop_wrong_state: u64,
    /// A DREQ naming a QPN that is not the connection's.
    pub drop_wrong_qpn: u64,
    /// REQs answered with a REJ because nothing listens on the service ID.
    pub rej_no_listener: u64,
    /// REQs answered with a REJ stale connection.
    pub rej_stale: u64,
    /// REQs answered with a REJ for an unsupported transport type.
    pub rej_transport: u64,
    /// REQs or SIDR_REQs refused because the ID table is full.
    pub rej_no_resources: u64,
    /// SIDR_REQs answered "unsupported" because nothing listens.
    pub sidr_no_listener: u64,
    /// DREQs for no known connection, answered with a DREP (as Linux does).
    pub drep_unknown: u64,
    /// MADs queued for sending (first transmissions and answers).
    pub tx_mads: u64,
    /// Retransmissions after a timeout.
    pub tx_retries: u64,
    /// Transmits dropped because the transmit queue was full.
    pub tx_queue_full: u64,
    /// REQs and SIDR_REQs refused because the consumer had `max_queue`
    /// events waiting (no event is ever dropped).
    pub event_queue_full: u64,
    /// REQ, REP, DREQ or SIDR_REQ that ran out of retries.
    pub timeouts: u64,
}
