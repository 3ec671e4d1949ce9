//! The C structs of `<rdma/rdma_cma.h>` (rdma-core 44) and the parts of
//! `<infiniband/verbs.h>` and `<infiniband/sa.h>` the library fills or
//! reads, written by hand. Their sizes and field offsets are asserted at
//! compile time, and the unit test `layouts_match_the_real_headers`
//! compares [`layout()`] with a C program compiled against the real headers.

#![allow(non_camel_case_types)]

mod consts;
mod layout;
mod rdma_cma;
mod sa;
mod verbs;

pub use consts::*;
pub use layout::layout;
pub use rdma_cma::*;
pub use sa::*;
pub use verbs::*;
