//! What a driver and a device in another process say on their socket.
//!
//! ```text
//! driver                                   device
//!   connect ───────────────────────────────▶ (listening)
//!   Hello { addr_base } + the memfd ───────▶ maps it (SCM_RIGHTS)
//!   ◀──────────────────────────────────────── Welcome { pid }
//!   Command(c) ────────────────────────────▶
//!   ◀──────────────────────────────────────── Reply(r)      (one per command, in order)
//!   Kick(doorbell) ────────────────────────▶                (no answer)
//!   ◀──────────────────────────────────────── Event(e)      (any time)
//!   close ─────────────────────────────────▶ the device ends
//! ```
//!
//! A frame is a little-endian `u32` length and that many bytes of one
//! message in postcard's encoding. Frames are at most [`MAX_FRAME`] bytes;
//! either side drops a peer that sends a longer one or one that does not
//! decode.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use uroce_device::command::{CmdError, Command, Reply};
use uroce_device::{Doorbell, Event};

/// The longest frame either side accepts (commands and replies are a few
/// hundred bytes).
pub const MAX_FRAME: usize = 64 << 10;

/// What the driver sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToDevice {
    /// The first message, with the memfd attached: the device address of
    /// the memory's first data byte.
    Hello {
        /// [`crate::shm::SharedMemory::addr_base`].
        addr_base: u64,
    },
    /// A command of the control path.
    Command(Command),
    /// A doorbell's notification.
    Kick(Doorbell),
}

/// What the device sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromDevice {
    /// The answer to `Hello`: the device runs in process `pid`.
    Welcome {
        /// The device's process id.
        pid: u32,
    },
    /// The answer to a command.
    Reply(Result<Reply, RemoteCmdError>),
    /// An event.
    Event(Event),
}

/// A [`CmdError`] on the wire (its text travels as a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteCmdError {
    /// EINVAL.
    Invalid(String),
    /// ENOMEM.
    NoResources(String),
    /// EBUSY.
    Busy(String),
    /// ENOENT.
    NotFound(String),
}

impl From<CmdError> for RemoteCmdError {
    fn from(e: CmdError) -> RemoteCmdError {
        match e {
            CmdError::Invalid(why) => RemoteCmdError::Invalid(why.to_string()),
            CmdError::NoResources(why) => RemoteCmdError::NoResources(why.to_string()),
            CmdError::Busy(why) => RemoteCmdError::Busy(why.to_string()),
            CmdError::NotFound(why) => RemoteCmdError::NotFound(why.to_string()),
        }
    }
}

impl RemoteCmdError {
    /// The error as the driver's vocabulary has it; the text is interned
    /// (at most [`MAX_INTERNED`] distinct texts are kept, so a device that
    /// sends endless new ones cannot grow the driver's memory).
    pub fn into_cmd_error(self) -> CmdError {
        match self {
            RemoteCmdError::Invalid(why) => CmdError::Invalid(intern(why)),
            RemoteCmdError::NoResources(why) => CmdError::NoResources(intern(why)),
            RemoteCmdError::Busy(why) => CmdError::Busy(intern(why)),
            RemoteCmdError::NotFound(why) => CmdError::NotFound(intern(why)),
        }
    }
}

/// The most distinct error texts a driver keeps.
pub const MAX_INTERNED: usize = 1024;

fn intern(text: String) -> &'static str {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static TEXTS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut texts = TEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&kept) = texts.get(text.as_str()) {
        return kept;
    }
    if texts.len() >= MAX_INTERNED {
        return "(the device's message was not kept)";
    }
    let kept: &'static str = Box::leak(text.into_boxed_str());
    texts.insert(kept);
    kept
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The socket failed or closed (`UnexpectedEof` at a clean close).
    Io(std::io::Error),
    /// A frame longer than [`MAX_FRAME`], or one that does not decode.
    Malformed,
}

/// Writes one message as a frame.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T) -> std::io::Result<()> {
    let bytes = postcard::to_stdvec(message)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    if bytes.len() > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too long"));
    }
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    frame.extend_from_slice(&bytes);
    out.write_all(&frame)
}

/// Reads one frame and decodes its message.
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len).map_err(FrameError::Io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::Malformed);
    }
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes).map_err(FrameError::Io)?;
    postcard::from_bytes(&bytes).map_err(|_| FrameError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_device::command::{QpAttr, QpCap, QpInit};
    use uroce_device::ring::RingDesc;
    use uroce_device::types::{AttrMask, QpState, QpType, Qpn};

    #[test]
    fn messages_round_trip() {
        let ring = RingDesc { base: 0x7f00_0000_1000, entries: 64, stride: 128 };
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let messages = [
            ToDevice::Hello { addr_base: 0x7f12_3456_7000 },
            ToDevice::Command(Command::CreateQp(QpInit {
                pd: 1,
                qp_type: QpType::Rc,
                send_cq: 2,
                recv_cq: 3,
                srq: None,
                sq: ring,
                rq: Some(ring),
                cap,
                sq_sig_all: true,
            })),
            ToDevice::Command(Command::ModifyQp {
                qpn: Qpn::new(0x10),
                attr: QpAttr { qp_state: Some(QpState::Rts), ..QpAttr::default() },
                mask: AttrMask::STATE,
            }),
            ToDevice::Kick(Doorbell::SendQueue(Qpn::new(0x4010))),
        ];
        for message in messages {
            let mut bytes = Vec::new();
            write_frame(&mut bytes, &message).unwrap();
            let back: ToDevice = read_frame(&mut bytes.as_slice()).unwrap();
            assert_eq!(back, message);
        }
        let reply = FromDevice::Reply(Err(RemoteCmdError::Busy("CQ still used by QPs".into())));
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &reply).unwrap();
        let FromDevice::Reply(Err(e)) = read_frame(&mut bytes.as_slice()).unwrap() else {
            panic!("a reply")
        };
        assert_eq!(e.into_cmd_error(), CmdError::Busy("CQ still used by QPs"));
    }

    #[test]
    fn long_or_garbled_frames_are_refused() {
        let mut long = (MAX_FRAME as u32 + 1).to_le_bytes().to_vec();
        long.extend(vec![0; 16]);
        assert!(matches!(read_frame::<ToDevice>(&mut long.as_slice()), Err(FrameError::Malformed)));
        let garbled = [3u8, 0, 0, 0, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame::<ToDevice>(&mut garbled.as_slice()),
            Err(FrameError::Malformed)
        ));
        let cut = [9u8, 0, 0, 0, 1];
        assert!(matches!(read_frame::<ToDevice>(&mut cut.as_slice()), Err(FrameError::Io(_))));
    }

    #[test]
    fn error_texts_are_interned_and_bounded() {
        let a = RemoteCmdError::Invalid("same".into()).into_cmd_error();
        let b = RemoteCmdError::Invalid("same".into()).into_cmd_error();
        let (CmdError::Invalid(a), CmdError::Invalid(b)) = (a, b) else { panic!() };
        assert!(core::ptr::eq(a, b), "one copy of a text");
    }
}
