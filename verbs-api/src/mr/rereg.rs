//! `ibv_rereg_mr`: a region changes its memory, its protection domain or
//! its rights in place. Its keys stay what they were (the device says so
//! in its reply, which the region reads them back from, as rdma-core
//! does), so peers holding the R_Key need not be told anything.
//!
//! What changes is checked here as far as the driver can (something to
//! change, a PD of the same device, a range); the device checks the rest
//! as for a registration. A failure leaves the region as it was.

use super::{Backing, Mr};
use crate::error::{Error, Result};
use crate::pd::Pd;
use uroce_device::command::{Command, MrTranslation, Reply};
use uroce_device::types::{Access, Lkey, Rkey};

/// What a re-registration changes besides the memory; `None` keeps it.
#[derive(Clone, Copy, Default)]
pub struct Rereg<'a> {
    /// `IBV_REREG_MR_CHANGE_PD`: the protection domain the region moves
    /// to (QPs of the old one can no longer use it).
    pub pd: Option<&'a Pd>,
    /// `IBV_REREG_MR_CHANGE_ACCESS`: its new rights.
    pub access: Option<Access>,
}

impl Mr {
    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD` and/or
    /// `IBV_REREG_MR_CHANGE_ACCESS`: EINVAL when `change` changes nothing.
    pub fn rereg(&mut self, change: Rereg<'_>) -> Result<()> {
        if change.pd.is_none() && change.access.is_none() {
            return Err(Error::Invalid("a re-registration that changes nothing"));
        }
        self.check_pd(&change)?;
        self.rereg_command(None, change)
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION` onto `length`
    /// bytes of fresh, zeroed memory the library allocates (as
    /// [`Pd::alloc_mr`]), and whatever `change` changes too. The memory
    /// the region covered is given back (freed, or handed back to the
    /// application) once the device covers the new one.
    pub fn rereg_alloc(&mut self, length: u64, change: Rereg<'_>) -> Result<()> {
        if length == 0 {
            return Err(Error::Invalid("a region of no bytes"));
        }
        self.check_pd(&change)?;
        let host = self.ctx.host().clone();
        let addr = host.allocate(length, 4096).map_err(|_| Error::NoMemory("MR memory"))?;
        if let Err(e) = self.rereg_command(Some((addr, length)), change) {
            host.free(addr);
            return Err(e);
        }
        self.release_memory();
        (self.addr, self.length, self.backing) = (addr, length, Backing::Owned);
        Ok(())
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION` onto the
    /// application's own memory, `length` bytes at `ptr` (seen at the
    /// address `ptr`, as rdma-core passes it), and whatever `change`
    /// changes too. The memory the region covered is given back once the
    /// device covers the new one (the ranges may overlap, or be the same:
    /// each is a registration of its own, so the new one is registered
    /// first and the old one removed after).
    ///
    /// # Safety
    ///
    /// As [`Pd::reg_mr_raw`], for the new range; the old one is the
    /// application's again when this succeeds (and stays the device's
    /// when it fails).
    pub unsafe fn rereg_raw(
        &mut self,
        ptr: *mut u8,
        length: usize,
        change: Rereg<'_>,
    ) -> Result<()> {
        if ptr.is_null() || length == 0 {
            return Err(Error::Invalid("a region of no bytes, or at NULL"));
        }
        self.check_pd(&change)?;
        let host = self.ctx.host().clone();
        // SAFETY: the caller's contract is the one register_external asks
        // for. The old range, still registered, may overlap the new one or
        // be the same: registrations are counted one by one.
        let addr = unsafe { host.register_external(ptr, length) }
            .map_err(|_| Error::Invalid("this device cannot register this memory"))?;
        if let Err(e) = self.rereg_command(Some((addr, length as u64)), change) {
            // The region still covers the old range, registered all along.
            host.unregister_external(addr, length);
            return Err(e);
        }
        self.release_memory();
        (self.addr, self.length, self.backing) = (addr, length as u64, Backing::External);
        Ok(())
    }

    /// A new PD must be one of this device's.
    fn check_pd(&self, change: &Rereg<'_>) -> Result<()> {
        match change.pd {
            Some(pd) if !pd.ctx.same_device(&self.ctx) => {
                Err(Error::Invalid("the protection domain is another device's"))
            }
            _ => Ok(()),
        }
    }

    /// The device's half: the region in place, its keys read back.
    fn rereg_command(&mut self, translation: Option<(u64, u64)>, change: Rereg<'_>) -> Result<()> {
        let command = Command::ReregMr {
            lkey: self.lkey.0,
            pd: change.pd.map(Pd::index),
            translation: translation.map(|(addr, length)| MrTranslation {
                addr,
                length,
                iova: addr,
            }),
            access: change.access,
        };
        match self.ctx.command(command)? {
            Reply::Mr { lkey, rkey } => {
                (self.lkey, self.rkey) = (Lkey(lkey), Rkey(rkey));
                Ok(())
            }
            _ => unreachable!("ReregMr answers Mr"),
        }
    }
}
