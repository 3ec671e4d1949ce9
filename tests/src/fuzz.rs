//! The body of the fuzz targets, shared with the proptest suite so that the
//! normal test run exercises it too.
