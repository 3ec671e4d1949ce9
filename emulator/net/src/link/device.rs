//! The smoltcp device of the link host: two frame queues the runtime
//! feeds and drains.

use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use std::collections::VecDeque;
use uroce_wire::ethernet;

/// A smoltcp device over two frame queues: the runtime feeds `rx` and
/// takes `tx`.
pub(super) struct QueueDevice {
    pub(super) rx: VecDeque<Vec<u8>>,
    pub(super) tx: VecDeque<Vec<u8>>,
    pub(super) ip_mtu: usize,
}

pub(super) struct RxToken(Vec<u8>);
pub(super) struct TxToken<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0u8; len];
        let result = f(&mut frame);
        self.0.push_back(frame);
        result
    }
}

impl Device for QueueDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        Some((RxToken(frame), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // smoltcp counts the Ethernet header in the MTU.
        caps.max_transmission_unit = self.ip_mtu + ethernet::HEADER_LEN;
        // Compute and verify every checksum: the peer is a real Linux.
        caps.checksum = ChecksumCapabilities::default();
        caps
    }
}
