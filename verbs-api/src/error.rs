//! What a verb can fail with.

use std::fmt;
use uroce_device::command::CmdError;
use uroce_device::mem::MemFault;

/// What a verb can fail with (the errno libibverbs would return is
/// [`Error::errno`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The HCA refused a command.
    Command(CmdError),
    /// EINVAL from the driver: the text says what is wrong.
    Invalid(&'static str),
    /// ENOMEM: the queue is full, or host memory ran out.
    NoMemory(&'static str),
    /// The device memory could not be reached.
    Fault(MemFault),
}

impl Error {
    /// The errno libibverbs would return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Command(e) => e.errno(),
            Error::Invalid(_) => 22,
            Error::NoMemory(_) => 12,
            Error::Fault(_) => 14,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Command(e) => write!(f, "{e}"),
            Error::Invalid(why) => write!(f, "invalid argument: {why}"),
            Error::NoMemory(why) => write!(f, "out of memory: {why}"),
            Error::Fault(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Error {
        Error::Command(e)
    }
}

impl From<MemFault> for Error {
    fn from(e: MemFault) -> Error {
        Error::Fault(e)
    }
}

/// A verbs result.
pub type Result<T> = core::result::Result<T, Error>;

/// The result of posting a chain of work requests: on failure, the index
/// of the WR that failed (libibverbs' `bad_wr`; the ones before it were
/// posted, it and the ones after it were not) and why.
pub type PostResult = core::result::Result<(), (usize, Error)>;
