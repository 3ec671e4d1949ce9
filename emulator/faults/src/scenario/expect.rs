//! `[expect]`: what a correct program observes under the scenario; here,
//! only the data. [`evaluate`](super::evaluate()) checks it against what a device
//! observed (`uroce run --check`, the harness's `Report::check`).

/// What one process (or every process) should observe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RoleExpect {
    /// `outcome`.
    pub outcome: Option<Outcome>,
    /// `status`: the first error completion's `IBV_WC_*` name.
    pub status: Option<String>,
    /// `within_ms`: from the first firing to that completion.
    pub within_ms: Option<u64>,
    /// `min_counters`, in file order.
    pub min_counters: Vec<(String, u64)>,
    /// `max_counters`, in file order.
    pub max_counters: Vec<(String, u64)>,
    /// `async_event`: an `IBV_EVENT_*` name.
    pub async_event: Option<String>,
    /// `exit`.
    pub exit: Option<ExpectExit>,
    /// `observe`: prose.
    pub observe: Option<String>,
}

/// `[expect]` and its per-role tables (`[expect.server]`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expect {
    /// The keys of `[expect]` itself: every role.
    pub common: RoleExpect,
    /// `[expect.<role>]`, in file order.
    pub roles: Vec<(String, RoleExpect)>,
}

impl Expect {
    /// What `role` should observe: its table if it has one, else the
    /// common one.
    pub fn for_role(&self, role: Option<&str>) -> &RoleExpect {
        role.and_then(|r| self.roles.iter().find(|(n, _)| n == r)).map_or(&self.common, |(_, e)| e)
    }
}

/// `outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every completion succeeds.
    Success,
    /// Some completion fails (`status` says how).
    Error,
}

/// `exit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectExit {
    /// `"killed"`: the process is killed (a `crash` with `exit`).
    Killed,
}

/// The `IBV_WC_*` status names `status` accepts.
pub const WC_STATUSES: [&str; 24] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_TM_ERR",
    "IBV_WC_TM_RNDV_INCOMPLETE",
];

/// The `IBV_EVENT_*` names `async_event` accepts.
pub const ASYNC_EVENTS: [&str; 20] = [
    "IBV_EVENT_CQ_ERR",
    "IBV_EVENT_QP_FATAL",
    "IBV_EVENT_QP_REQ_ERR",
    "IBV_EVENT_QP_ACCESS_ERR",
    "IBV_EVENT_COMM_EST",
    "IBV_EVENT_SQ_DRAINED",
    "IBV_EVENT_PATH_MIG",
    "IBV_EVENT_PATH_MIG_ERR",
    "IBV_EVENT_DEVICE_FATAL",
    "IBV_EVENT_PORT_ACTIVE",
    "IBV_EVENT_PORT_ERR",
    "IBV_EVENT_LID_CHANGE",
    "IBV_EVENT_PKEY_CHANGE",
    "IBV_EVENT_SM_CHANGE",
    "IBV_EVENT_SRQ_ERR",
    "IBV_EVENT_SRQ_LIMIT_REACHED",
    "IBV_EVENT_QP_LAST_WQE_REACHED",
    "IBV_EVENT_CLIENT_REREGISTER",
    "IBV_EVENT_GID_CHANGE",
    "IBV_EVENT_WQ_FATAL",
];
