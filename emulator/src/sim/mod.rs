//! The simulated fabric (to be written).
