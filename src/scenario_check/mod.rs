//! What `uroce run --scenario` reads back after the program ends: the
//! scenario report the device wrote (`UROCE_SCENARIO_REPORT`; design note
//! fault-scenarios.md §10b), summarized on one screen, and with `--check`
//! compared against the scenario's `[expect]` for the run's role.
//!
//! - [`report`]: the report's lines read back ([`Report::parse`]);
//! - [`verdict`]: the comparison ([`check`]);
//! - [`hints`]: what the scenario's roles and params say before the run
//!   and when nothing fired ([`validate`], [`role_warnings`],
//!   [`why_no_firing`]).

pub mod hints;
pub mod report;
pub mod verdict;

pub use hints::{firing_params, role_warnings, roles, validate, why_no_firing, Sharing};
pub use report::{DeviceSummary, Fired, RaisedEvent, Report};
pub use verdict::{
    after_firing, check, counter_names, observed, plural, signal_name, unknown_counters, Ended,
    Verdict,
};

/// A report of two devices shared by the modules' tests.
#[cfg(test)]
mod test_report {
    pub(super) const REPORT: &str = "\
1000000 scenario x 10.0.0.1 loaded at_us=0 from library seed 0
1000000 scenario x 10.0.0.2 0 loaded from library seed 0
1500000 scenario 10.0.0.2 500000 rule down fired 1: link_down on in SEND_ONLY
2100000 scenario x 10.0.0.1 completions success=9 errors=2 IBV_WC_RETRY_EXC_ERR=1 IBV_WC_WR_FLUSH_ERR=1 first_error=IBV_WC_RETRY_EXC_ERR qp=0x000011 wr_id=9 at_us=1040000
2100000 scenario x 10.0.0.1 async_events total=2 IBV_EVENT_QP_ACCESS_ERR=1 IBV_EVENT_PORT_ACTIVE=1
2100000 scenario x 10.0.0.1 async_event IBV_EVENT_PORT_ACTIVE port=1 at_us=0
2100000 scenario x 10.0.0.1 async_event IBV_EVENT_QP_ACCESS_ERR qp=0x000011 at_us=520000
2100000 scenario x 10.0.0.1 counters sent_pkts=30 completer_retry_err=7
2100000 scenario x 10.0.0.1 runtime_counters rx_datagrams=31 rx_dropped=2
";
}
