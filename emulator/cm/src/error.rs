//! Why a consumer's request was refused.

use core::fmt;

/// A consumer request the engine refused; nothing was sent or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// No such CM ID (never was, or already gone).
    UnknownId,
    /// The CM ID is not in a state that allows the request.
    WrongState,
    /// More private data than the message carries.
    PrivateDataTooLong,
    /// Another listen already holds the service ID.
    ServiceIdInUse,
    /// No listen on the service ID.
    NotListening,
    /// Every CM ID the configuration allows is in use.
    TooManyIds,
    /// A parameter out of its field's range (e.g. a transport not RC/UC).
    InvalidParameter,
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmError::UnknownId => "unknown CM ID",
            CmError::WrongState => "CM ID in the wrong state",
            CmError::PrivateDataTooLong => "private data too long",
            CmError::ServiceIdInUse => "service ID already listened on",
            CmError::NotListening => "service ID not listened on",
            CmError::TooManyIds => "no CM ID left",
            CmError::InvalidParameter => "invalid parameter",
        })
    }
}

impl std::error::Error for CmError {}
