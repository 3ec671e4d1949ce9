//! The HCA's vocabulary. Numeric values follow libibverbs (`ibv_*`) so
//! that a libibverbs provider can pass them through unchanged.

use core::fmt;

pub use uroce_wire::{Psn, Qkey, Qpn, Rkey};

/// A local key: names a memory region for the HCA's own DMA (in SGEs).
/// Like an R_Key it is `mpt_index << 8 | key`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Lkey(pub u32);

impl fmt::Display for Lkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}

/// Splits a memory key into (MPT index, 8-bit key).
pub const fn key_parts(key: u32) -> (u32, u8) {
    (key >> 8, key as u8)
}

/// Builds a memory key from an MPT index and an 8-bit key.
pub const fn make_key(index: u32, key: u8) -> u32 {
    (index << 8) | key as u32
}

macro_rules! flags {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $flag:ident = $value:expr,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[derive(serde::Serialize, serde::Deserialize)]
        pub struct $name(pub u32);

        impl $name {
            $($(#[$fmeta])* pub const $flag: $name = $name($value);)*
            /// No flag.
            pub const EMPTY: $name = $name(0);
            /// Every flag this type knows.
            pub const ALL: $name = $name(0 $(| $value)*);

            /// Whether every flag of `other` is set.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// Whether any flag of `other` is set.
            pub const fn intersects(self, other: $name) -> bool {
                self.0 & other.0 != 0
            }
            /// Whether bits outside [`Self::ALL`] are set.
            pub const fn has_unknown_bits(self) -> bool {
                self.0 & !Self::ALL.0 != 0
            }
            /// `self` with the flags of `other` added.
            pub const fn with(self, other: $name) -> $name {
                $name(self.0 | other.0)
            }
            /// `self` with the flags of `other` removed.
            pub const fn without(self, other: $name) -> $name {
                $name(self.0 & !other.0)
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, other: $name) -> $name {
                self.with(other)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                $(if self.contains($name::$flag) && $value != 0 {
                    if !first { f.write_str("|")?; }
                    f.write_str(stringify!($flag))?;
                    first = false;
                })*
                let unknown = self.0 & !Self::ALL.0;
                if unknown != 0 {
                    if !first { f.write_str("|")?; }
                    write!(f, "0x{unknown:x}")?;
                    first = false;
                }
                if first { f.write_str("EMPTY")?; }
                Ok(())
            }
        }
    };
}

flags! {
    /// Memory access rights (`ibv_access_flags`).
    Access {
        /// The HCA may write the memory for local operations (receives,
        /// READ responses, atomic results).
        LOCAL_WRITE = 1,
        /// Remote RDMA WRITEs may target it.
        REMOTE_WRITE = 2,
        /// Remote RDMA READs may target it.
        REMOTE_READ = 4,
        /// Remote atomics may target it.
        REMOTE_ATOMIC = 8,
        /// Memory windows may be bound to it.
        MW_BIND = 16,
        /// Addresses are offsets from the region's start.
        ZERO_BASED = 32,
        /// Remote FLUSH for global visibility.
        FLUSH_GLOBAL = 256,
        /// Remote FLUSH for persistence.
        FLUSH_PERSISTENT = 512,
    }
}

flags! {
    /// Send work request flags (`ibv_send_flags`).
    SendFlags {
        /// Wait for earlier READs and atomics to complete first.
        FENCE = 1,
        /// Produce a completion even if the QP does not signal all WRs.
        SIGNALED = 2,
        /// Ask the responder to raise a solicited event.
        SOLICITED = 4,
        /// The data is in the WQE itself, not in SGEs.
        INLINE = 8,
    }
}

flags! {
    /// QP attribute mask (`ibv_qp_attr_mask`): which attributes a modify
    /// sets.
    AttrMask {
        /// `qp_state`.
        STATE = 1,
        /// `cur_qp_state`.
        CUR_STATE = 2,
        /// `en_sqd_async_notify`.
        EN_SQD_ASYNC_NOTIFY = 4,
        /// `qp_access_flags`.
        ACCESS_FLAGS = 8,
        /// `pkey_index`.
        PKEY_INDEX = 16,
        /// `port_num`.
        PORT = 32,
        /// `qkey`.
        QKEY = 64,
        /// `ah_attr` (the primary path).
        AV = 128,
        /// `path_mtu`.
        PATH_MTU = 256,
        /// `timeout`.
        TIMEOUT = 512,
        /// `retry_cnt`.
        RETRY_CNT = 1024,
        /// `rnr_retry`.
        RNR_RETRY = 2048,
        /// `rq_psn`.
        RQ_PSN = 4096,
        /// `max_rd_atomic`.
        MAX_QP_RD_ATOMIC = 8192,
        /// `alt_ah_attr` and friends.
        ALT_PATH = 16384,
        /// `min_rnr_timer`.
        MIN_RNR_TIMER = 32768,
        /// `sq_psn`.
        SQ_PSN = 65536,
        /// `max_dest_rd_atomic`.
        MAX_DEST_RD_ATOMIC = 131072,
        /// `path_mig_state`.
        PATH_MIG_STATE = 262144,
        /// `cap`.
        CAP = 524288,
        /// `dest_qp_num`.
        DEST_QPN = 1048576,
        /// `rate_limit`.
        RATE_LIMIT = 33554432,
    }
}

flags! {
    /// Work completion flags (`ibv_wc_flags`).
    WcFlags {
        /// The receive buffer starts with a 40-byte GRH (UD).
        GRH = 1,
        /// `imm_data` is valid.
        WITH_IMM = 2,
        /// The IP checksum was checked.
        IP_CSUM_OK = 4,
        /// `invalidated_rkey` is valid.
        WITH_INV = 8,
    }
}

macro_rules! numbered {
    ($(#[$meta:meta])* $name:ident : $repr:ty { $($(#[$vmeta:meta])* $variant:ident = $value:expr,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[repr($repr)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $value,)*
        }

        impl $name {
            /// The value for a number, if there is one.
            pub const fn from_raw(raw: $repr) -> Option<$name> {
                match raw {
                    $($value => Some($name::$variant),)*
                    _ => None,
                }
            }
            /// The number.
            pub const fn raw(self) -> $repr {
                self as $repr
            }
        }
    };
}

numbered! {
    /// QP transport type (`ibv_qp_type`).
    QpType: u8 {
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
    }
}

numbered! {
    /// QP state (`ibv_qp_state`).
    QpState: u8 {
        /// Just created or reset: nothing runs.
        Reset = 0,
        /// Receives may be posted; nothing is sent or received.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drained (no new WQEs are started).
        Sqd = 4,
        /// Send queue error (UC/UD): a send failed, receives go on.
        Sqe = 5,
        /// Error: every outstanding WQE is flushed.
        Err = 6,
    }
}

numbered! {
    /// Path MTU (`ibv_mtu`).
    Mtu: u8 {
        /// 256 bytes.
        Mtu256 = 1,
        /// 512 bytes.
        Mtu512 = 2,
        /// 1024 bytes.
        Mtu1024 = 3,
        /// 2048 bytes.
        Mtu2048 = 4,
        /// 4096 bytes.
        Mtu4096 = 5,
    }
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The largest path MTU that fits in `bytes` (at least 256).
    pub const fn fitting(bytes: u32) -> Mtu {
        match bytes {
            0..=511 => Mtu::Mtu256,
            512..=1023 => Mtu::Mtu512,
            1024..=2047 => Mtu::Mtu1024,
            2048..=4095 => Mtu::Mtu2048,
            _ => Mtu::Mtu4096,
        }
    }
}

numbered! {
    /// Send work request opcode (`ibv_wr_opcode`).
    WrOpcode: u8 {
        /// RDMA WRITE.
        RdmaWrite = 0,
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1,
        /// SEND.
        Send = 2,
        /// SEND with immediate.
        SendWithImm = 3,
        /// RDMA READ.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Invalidate a local key.
        LocalInv = 7,
        /// Bind a type-2 memory window.
        BindMw = 8,
        /// SEND with invalidate.
        SendWithInv = 9,
        /// RDMA FLUSH.
        Flush = 14,
        /// Atomic WRITE (8 bytes, written at once).
        AtomicWrite = 15,
    }
}

numbered! {
    /// Work completion status (`ibv_wc_status`).
    WcStatus: u8 {
        /// The operation completed.
        Success = 0,
        /// Local length error: a message did not fit the posted buffers.
        LocLenErr = 1,
        /// Local QP operation error: a WQE the QP cannot execute.
        LocQpOpErr = 2,
        /// Local EE context operation error (RD only).
        LocEecOpErr = 3,
        /// Local protection error: an SGE's key, access or bounds failed.
        LocProtErr = 4,
        /// Flushed: the QP was in the error state.
        WrFlushErr = 5,
        /// Memory window bind failed.
        MwBindErr = 6,
        /// Bad response: an unexpected opcode or length from the responder.
        BadRespErr = 7,
        /// Local access error (on a receive: a protection error).
        LocAccessErr = 8,
        /// Remote invalid request (NAK invalid request).
        RemInvReqErr = 9,
        /// Remote access error (NAK remote access error).
        RemAccessErr = 10,
        /// Remote operational error (NAK remote operational error).
        RemOpErr = 11,
        /// Transport retries exhausted.
        RetryExcErr = 12,
        /// RNR retries exhausted.
        RnrRetryExcErr = 13,
        /// Local RDD violation (RD only).
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
    }
}

numbered! {
    /// Work completion opcode (`ibv_wc_opcode`).
    WcOpcode: u8 {
        /// A SEND completed.
        Send = 0,
        /// An RDMA WRITE completed.
        RdmaWrite = 1,
        /// An RDMA READ completed.
        RdmaRead = 2,
        /// A compare and swap completed.
        CompSwap = 3,
        /// A fetch and add completed.
        FetchAdd = 4,
        /// A memory window bind completed.
        BindMw = 5,
        /// A local invalidate completed.
        LocalInv = 6,
        /// A FLUSH completed.
        Flush = 8,
        /// An ATOMIC WRITE completed.
        AtomicWrite = 9,
        /// A receive completed (SEND received).
        Recv = 128,
        /// A receive consumed by an RDMA WRITE with immediate.
        RecvRdmaWithImm = 129,
    }
}

numbered! {
    /// Asynchronous event (`ibv_event_type`).
    EventType: u8 {
        /// A CQ overran.
        CqErr = 0,
        /// A QP hit a fatal error.
        QpFatal = 1,
        /// Invalid request local work queue error.
        QpReqErr = 2,
        /// Local access violation.
        QpAccessErr = 3,
        /// Communication established.
        CommEst = 4,
        /// The send queue drained (SQD).
        SqDrained = 5,
        /// The port became active.
        PortActive = 9,
        /// The port went down.
        PortErr = 10,
        /// An SRQ hit an error.
        SrqErr = 14,
        /// An SRQ's limit was reached.
        SrqLimitReached = 15,
        /// The last WQE of a QP attached to an SRQ was reached.
        QpLastWqeReached = 16,
    }
}

impl WrOpcode {
    /// Whether a QP of `qp_type` may execute this opcode (IBA 10.7.3.1;
    /// the table rxe calls `rxe_wr_opcode_info`).
    pub const fn allowed_on(self, qp_type: QpType) -> bool {
        use WrOpcode::*;
        match qp_type {
            QpType::Rc => true,
            // UC has no SEND-with-invalidate opcodes.
            QpType::Uc => matches!(
                self,
                RdmaWrite | RdmaWriteWithImm | Send | SendWithImm | LocalInv | BindMw
            ),
            QpType::Ud => matches!(self, Send | SendWithImm),
        }
    }

    /// The completion opcode a requester reports for this WR.
    pub const fn completion(self) -> WcOpcode {
        use WrOpcode::*;
        match self {
            RdmaWrite | RdmaWriteWithImm => WcOpcode::RdmaWrite,
            Send | SendWithImm | SendWithInv => WcOpcode::Send,
            RdmaRead => WcOpcode::RdmaRead,
            AtomicCmpAndSwp => WcOpcode::CompSwap,
            AtomicFetchAndAdd => WcOpcode::FetchAdd,
            LocalInv => WcOpcode::LocalInv,
            BindMw => WcOpcode::BindMw,
            Flush => WcOpcode::Flush,
            AtomicWrite => WcOpcode::AtomicWrite,
        }
    }

    /// Local operations run inside the HCA and send nothing.
    pub const fn is_local(self) -> bool {
        matches!(self, WrOpcode::LocalInv | WrOpcode::BindMw)
    }

    /// READ and atomics: the requester waits for data to come back, and
    /// they count against `max_rd_atomic`.
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd
                | WrOpcode::Flush
                | WrOpcode::AtomicWrite
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_libibverbs() {
        assert_eq!(WcStatus::RetryExcErr.raw(), 12);
        assert_eq!(WcStatus::RnrRetryExcErr.raw(), 13);
        assert_eq!(WcStatus::WrFlushErr.raw(), 5);
        assert_eq!(WcOpcode::RecvRdmaWithImm.raw(), 129);
        assert_eq!(WrOpcode::SendWithInv.raw(), 9);
        assert_eq!(AttrMask::DEST_QPN.0, 1 << 20);
        assert_eq!(AttrMask::SQ_PSN.0, 1 << 16);
        assert_eq!(QpType::Ud.raw(), 4);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::fitting(1500 - 96), Mtu::Mtu1024);
        assert_eq!(WrOpcode::from_raw(10), None);
    }

    #[test]
    fn keys_split_and_join() {
        assert_eq!(make_key(0x1234, 0xab), 0x0012_34ab);
        assert_eq!(key_parts(0x0012_34ab), (0x1234, 0xab));
    }

    #[test]
    fn flags_report_unknown_bits() {
        assert!(!Access(3).has_unknown_bits());
        assert!(Access(1 << 30).has_unknown_bits());
        assert_eq!(
            format!("{:?}", Access::LOCAL_WRITE | Access::REMOTE_READ),
            "LOCAL_WRITE|REMOTE_READ"
        );
    }

    #[test]
    fn opcode_legality_per_qp_type() {
        assert!(WrOpcode::RdmaRead.allowed_on(QpType::Rc));
        assert!(!WrOpcode::RdmaRead.allowed_on(QpType::Uc));
        assert!(!WrOpcode::RdmaWrite.allowed_on(QpType::Ud));
        assert!(WrOpcode::SendWithImm.allowed_on(QpType::Ud));
    }
}
