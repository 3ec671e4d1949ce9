//! Memory regions ([`Mr`]) and memory windows ([`Mw`]).
//!
//! Every access the driver makes to registered memory is in this file:
//! the application reaches it only through copies ([`Mr::read`],
//! [`Mr::write`]), so it can never race the device.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::pd::Pd;
use std::cell::Cell;
use uroce_device::command::{Command, Reply};
use uroce_device::types::{Access, Lkey, Rkey};
use uroce_device::wqe::Sge;

mod rereg;
pub use rereg::Rereg;

impl Pd {
    /// Registers `length` bytes of fresh, zeroed memory with `access`
    /// (`ibv_reg_mr` on a buffer the library allocates). The application
    /// reaches it through [`Mr::read`] and [`Mr::write`].
    pub fn alloc_mr(&self, length: u64, access: Access) -> Result<Mr> {
        let host = self.ctx.host();
        let addr = host.allocate(length.max(1), 4096).map_err(|_| Error::NoMemory("MR memory"))?;
        self.register_at(addr, length, addr, access, Backing::Owned).inspect_err(|_| {
            host.free(addr);
        })
    }

    /// Registers host memory at `addr` as an MR, its first byte at virtual
    /// address `iova`. The caller undoes its own allocation on error.
    fn register_at(
        &self,
        addr: u64,
        length: u64,
        iova: u64,
        access: Access,
        backing: Backing,
    ) -> Result<Mr> {
        let command = Command::RegMr { pd: self.index, addr, length, iova, access };
        match self.ctx.command(command)? {
            Reply::Mr { lkey, rkey } => Ok(Mr {
                ctx: self.ctx.clone(),
                addr,
                length,
                lkey: Lkey(lkey),
                rkey: Rkey(rkey),
                backing,
            }),
            _ => unreachable!("RegMr answers Mr"),
        }
    }

    /// `ibv_reg_mr` on the application's own memory: registers `length`
    /// bytes at `ptr` with `access`. Only devices on real process memory
    /// (`uroce_net::process_mem::ProcessMemory`) accept it.
    ///
    /// # Safety
    ///
    /// Until the region is deregistered, the memory must stay allocated,
    /// and the application must neither hold references into it nor read
    /// or write it while the device may (after posting work that uses it
    /// and before its completion, or while a peer holds its R_Key): the
    /// device reads and writes it at any time, like DMA.
    pub unsafe fn reg_mr_raw(&self, ptr: *mut u8, length: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller's contract is reg_mr_raw_iova's.
        unsafe { self.reg_mr_raw_iova(ptr, length, ptr.addr() as u64, access) }
    }

    /// [`Pd::reg_mr_raw`] with the region's first byte at virtual address
    /// `iova` (`ibv_reg_mr_iova2`): SGEs and remote peers address the
    /// region from `iova`.
    ///
    /// # Safety
    ///
    /// As [`Pd::reg_mr_raw`].
    pub unsafe fn reg_mr_raw_iova(
        &self,
        ptr: *mut u8,
        length: usize,
        iova: u64,
        access: Access,
    ) -> Result<Mr> {
        let host = self.ctx.host();
        // SAFETY: the caller's contract above is the one register_external
        // asks for. Other regions over the same memory are no obstacle:
        // each region is a registration of its own.
        let addr = unsafe { host.register_external(ptr, length) }
            .map_err(|_| Error::Invalid("this device cannot register external memory"))?;
        self.register_at(addr, length as u64, iova, access, Backing::External).inspect_err(|_| {
            host.unregister_external(addr, length);
        })
    }

    /// `ibv_alloc_mw`.
    pub fn alloc_mw(&self, mw_type: u8) -> Result<Mw> {
        match self.ctx.command(Command::AllocMw { pd: self.index, mw_type })? {
            Reply::Mw { rkey } => {
                Ok(Mw { ctx: self.ctx.clone(), rkey: Cell::new(Rkey(rkey)), mw_type })
            }
            _ => unreachable!("AllocMw answers Mw"),
        }
    }
}

/// A registered memory region (`ibv_mr`).
pub struct Mr {
    ctx: Context,
    addr: u64,
    length: u64,
    lkey: Lkey,
    rkey: Rkey,
    /// Whose memory it is.
    backing: Backing,
}

/// Whose memory a region covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// The library allocated it ([`Pd::alloc_mr`]): freed with the region.
    Owned,
    /// The application's own ([`Pd::reg_mr_raw`]): handed back with the
    /// region (its registration of the range, `[addr, addr + length)`,
    /// removed; other regions' registrations of the same memory stay).
    External,
}

impl Mr {
    /// Its first virtual address (what SGEs and remote peers use).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Its length.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// Local key.
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        self.rkey
    }
    /// An SGE covering `len` bytes from `offset`. The SGE is not checked
    /// against the region (the HCA checks it when the WR runs, as hardware
    /// does); an address past 2^64 wraps, and the HCA refuses it.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.addr.wrapping_add(offset), length: len, lkey: self.lkey }
    }

    fn check(&self, offset: u64, len: usize) -> Result<u64> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.length => Ok(self.addr + offset),
            _ => Err(Error::Invalid("range outside the memory region")),
        }
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let at = self.check(offset, dst.len())?;
        Ok(self.ctx.host().read(at, dst)?)
    }

    /// Copies `len` bytes out of the region into a new vector.
    pub fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let at = self.check(offset, src.len())?;
        Ok(self.ctx.host().write(at, src)?)
    }

    /// `ibv_dereg_mr`. Memory the library allocated is freed with it;
    /// the application's own memory is handed back.
    pub fn dereg(self) -> core::result::Result<(), (Mr, Error)> {
        match self.ctx.command(Command::DeregMr { lkey: self.lkey.0 }) {
            Ok(_) => {
                self.release_memory();
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }

    /// Gives back the memory the region covered: freed if the library
    /// allocated it, handed back to the application otherwise.
    fn release_memory(&self) {
        let host = self.ctx.host();
        match self.backing {
            Backing::Owned => {
                host.free(self.addr);
            }
            Backing::External => {
                // `length` came from a `usize` (`reg_mr_raw`, `rereg_raw`):
                // the cast is exact.
                host.unregister_external(self.addr, self.length as usize);
            }
        }
    }
}

/// A memory window (`ibv_mw`).
pub struct Mw {
    ctx: Context,
    rkey: Cell<Rkey>,
    mw_type: u8,
}

impl Mw {
    /// The window's current R_Key.
    pub fn rkey(&self) -> Rkey {
        self.rkey.get()
    }
    /// Type 1 or 2.
    pub fn mw_type(&self) -> u8 {
        self.mw_type
    }
    /// Records the R_Key a bind WR gave the window.
    pub fn set_rkey(&self, rkey: Rkey) {
        self.rkey.set(rkey);
    }
    /// `ibv_dealloc_mw`. After it succeeds the window is gone: drop it
    /// (a failure leaves it allocated).
    pub fn dealloc(&self) -> Result<()> {
        self.ctx.command(Command::DeallocMw { rkey: self.rkey.get().0 })?;
        Ok(())
    }
}
