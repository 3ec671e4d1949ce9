//! Re-registration (`ibv_rereg_mr`): a region changes its memory, its
//! protection domain or its rights in place, under the keys it has, as
//! mlx5 does (rdma-core reads the keys back from the reply, and the
//! applications that use it expect them unchanged).

use super::{check_region_access, MemoryTables, MptKind, RegisterError};
use crate::handles::PdIndex;
use uroce_device::types::{key_parts, Access};

/// What a re-registration changes; `None` keeps what the region has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reregistration {
    /// The new protection domain (its existence is the caller's check).
    pub pd: Option<PdIndex>,
    /// The new memory: host address, length, virtual address.
    pub translation: Option<(u64, u64, u64)>,
    /// The new rights.
    pub access: Option<Access>,
}

impl MemoryTables {
    /// Re-registers region `key` (its current key) in place: everything
    /// is checked as [`MemoryTables::register`] checks it before anything
    /// changes, and a region with windows bound to it is refused (`Busy`,
    /// as deregistration: the windows would outlive the memory or the
    /// rights they were bound under). The region is valid afterwards (a
    /// re-registration, after an invalidation too). Returns the protection
    /// domain it had.
    ///
    /// The zero-based flag cannot change without a new translation: the
    /// region's virtual start would have to be made up.
    pub fn reregister(
        &mut self,
        key: u32,
        change: Reregistration,
    ) -> Result<PdIndex, RegisterError> {
        let (index, _) = key_parts(key);
        let entry = *self.entry_for_key(key).ok_or(RegisterError::NotFound)?;
        let MptKind::Region { mtt, bound_windows } = entry.kind else {
            return Err(RegisterError::NotFound);
        };
        if bound_windows > 0 {
            return Err(RegisterError::Busy);
        }
        let access = change.access.unwrap_or(entry.access);
        check_region_access(access)?;
        let zero_based = access.contains(Access::ZERO_BASED);
        let (iova, length, page_list) = match change.translation {
            Some((host_addr, length, iova)) => {
                let (iova, page_list) = self.translate(host_addr, length, iova, access)?;
                (iova, length, Some(page_list))
            }
            None if zero_based != entry.access.contains(Access::ZERO_BASED) => {
                return Err(RegisterError::BadArgument);
            }
            None => (entry.iova, entry.length, None),
        };
        if let Some(page_list) = page_list {
            *self.mtt.get_mut(mtt).ok_or(RegisterError::NotFound)? = page_list;
        }
        let region = self.mpt.get_mut(index as usize).ok_or(RegisterError::NotFound)?;
        region.pd = change.pd.unwrap_or(entry.pd);
        region.iova = iova;
        region.length = length;
        region.access = access;
        region.valid = true;
        Ok(entry.pd)
    }
}
