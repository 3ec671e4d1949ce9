//! The services listened on: exact service IDs (no masks), one listener
//! each, for both REQs and SIDR_REQs.

use crate::error::CmError;
use std::collections::BTreeSet;
use uroce_wire::mad::ServiceId;

#[derive(Debug, Default)]
pub(crate) struct Listeners {
    services: BTreeSet<u64>,
}

impl Listeners {
    pub(crate) fn insert(&mut self, service_id: ServiceId) -> Result<(), CmError> {
        if self.services.insert(service_id.0) {
            Ok(())
        } else {
            Err(CmError::ServiceIdInUse)
        }
    }
    pub(crate) fn remove(&mut self, service_id: ServiceId) -> Result<(), CmError> {
        if self.services.remove(&service_id.0) {
            Ok(())
        } else {
            Err(CmError::NotListening)
        }
    }
    pub(crate) fn contains(&self, service_id: ServiceId) -> bool {
        self.services.contains(&service_id.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_exclusive() {
        let mut l = Listeners::default();
        l.insert(ServiceId(7)).unwrap();
        assert_eq!(l.insert(ServiceId(7)), Err(CmError::ServiceIdInUse));
        assert!(l.contains(ServiceId(7)));
        assert!(!l.contains(ServiceId(6)));
        l.remove(ServiceId(7)).unwrap();
        assert_eq!(l.remove(ServiceId(7)), Err(CmError::NotListening));
    }
}
