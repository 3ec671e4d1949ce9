//! Protection domains ([`Pd`]) and address handles ([`Ah`]).
//!
//! The verbs that create objects in a PD are beside their object:
//! [`Pd::alloc_mr`], [`Pd::reg_mr_raw`] and [`Pd::alloc_mw`] in `mr.rs`,
//! [`Pd::create_srq`] in `srq.rs`, [`Pd::create_qp`] in `qp.rs`.

use crate::context::Context;
use crate::error::Result;
use std::cell::Cell;
use uroce_device::command::{AhAttr, Command, Reply};

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd> {
        match self.command(Command::AllocPd)? {
            Reply::Index(index) => Ok(Pd { ctx: self.clone(), index, freed: Cell::new(false) }),
            _ => unreachable!("AllocPd answers Index"),
        }
    }
}

/// A protection domain (`ibv_pd`).
pub struct Pd {
    pub(crate) ctx: Context,
    pub(crate) index: u32,
    freed: Cell<bool>,
}

impl Pd {
    /// The PD's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: AhAttr) -> Result<Ah> {
        match self.ctx.command(Command::CreateAh { pd: self.index, attr })? {
            Reply::Index(index) => Ok(Ah { ctx: self.ctx.clone(), index }),
            _ => unreachable!("CreateAh answers Index"),
        }
    }

    /// Another handle on this protection domain (what a parent domain of
    /// libibverbs is: objects created through it belong to this PD).
    /// Deallocating the PD stays the job of this handle.
    pub fn share(&self) -> Pd {
        Pd { ctx: self.ctx.clone(), index: self.index, freed: Cell::new(false) }
    }

    /// `ibv_dealloc_pd`: refused (EBUSY) while anything uses the PD.
    pub fn dealloc(&self) -> Result<()> {
        self.ctx.command(Command::DeallocPd { pd: self.index })?;
        self.freed.set(true);
        Ok(())
    }
}

/// An address handle (`ibv_ah`).
pub struct Ah {
    ctx: Context,
    index: u32,
}

impl Ah {
    /// The AH's index.
    pub fn index(&self) -> u32 {
        self.index
    }
    /// `ibv_destroy_ah`.
    pub fn destroy(self) -> Result<()> {
        self.ctx.command(Command::DestroyAh { ah: self.index })?;
        Ok(())
    }
}
