//! The executor: node tasks on the simulated fabric, in virtual time.

use crate::env::{Clock, SimEnv};
use crate::oob::{self, SimOob};
use crate::report::Report;
use crate::world::{Stop, World, WorldBuilder};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;
use uroce_hca::config::HcaConfig;
use uroce_hca::{Instant, SharedHca};
use uroce_sim::{FabricConfig, FaultConfig, Scenario};
use uroce_verbs::Context;

/// The latency jitter a [`Sim`] has unless told otherwise
/// ([`SimBuilder::latency_jitter`]): up to 1 µs on the fabric's 2 µs, so
/// that seeds explore when packets and timers meet, not only faults.
pub const DEFAULT_LATENCY_JITTER: Duration = Duration::from_micros(1);

/// How to build a [`Sim`] ([`Sim::builder`]).
pub struct SimBuilder {
    seed: u64,
    nodes: usize,
    fabric: FabricConfig,
    hca: Option<HcaConfig>,
    scenario: Option<Scenario>,
    roles: Vec<(usize, String)>,
}

impl SimBuilder {
    /// The number of nodes (default 2).
    pub fn nodes(mut self, nodes: usize) -> SimBuilder {
        self.nodes = nodes;
        self
    }

    /// The fabric's configuration (latency, jitter, rate, limits). Its
    /// `seed` is replaced by the builder's: the run stays a function of the
    /// seed. Its `latency_jitter_ns` is taken as given ([`FabricConfig::new`]
    /// has none): call [`SimBuilder::latency_jitter`] after this to set it.
    pub fn fabric(mut self, config: FabricConfig) -> SimBuilder {
        self.fabric = FabricConfig { seed: self.seed, ..config };
        self
    }

    /// Up to `jitter` more one-way latency per packet, drawn from the seed
    /// (default [`DEFAULT_LATENCY_JITTER`]; `Duration::ZERO`: every packet
    /// takes the fabric's latency exactly, and seeds differ only where
    /// faults or a scenario draw). A link stays FIFO.
    pub fn latency_jitter(mut self, jitter: Duration) -> SimBuilder {
        self.fabric.latency_jitter_ns = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// Background faults on every packet (loss, duplication, reordering,
    /// corruption), drawn from the seed.
    pub fn faults(mut self, faults: FaultConfig) -> SimBuilder {
        self.fabric.faults = faults;
        self
    }

    /// Every HCA's configuration (default: [`HcaConfig::default`] with the
    /// seed as its CM seed).
    pub fn hca(mut self, config: HcaConfig) -> SimBuilder {
        self.hca = Some(config);
        self
    }

    /// Runs `scenario` on every node's port ([`WorldBuilder::scenario`]);
    /// its random parts are drawn from its seed xor the run's.
    pub fn scenario(mut self, scenario: Scenario) -> SimBuilder {
        self.scenario = Some(scenario);
        self
    }

    /// Node `node`'s role (the scenario's rules with a `role` apply only
    /// on the nodes that have it; [`Node::role`]).
    pub fn role(mut self, node: usize, role: &str) -> SimBuilder {
        self.roles.push((node, role.to_owned()));
        self
    }

    /// The simulation, at virtual time 0 with no task.
    pub fn build(self) -> Sim {
        let mut builder = WorldBuilder::new(self.nodes, self.fabric);
        if let Some(hca) = self.hca {
            builder = builder.hca_config(hca);
        }
        if let Some(scenario) = self.scenario {
            builder = builder.scenario(scenario);
        }
        let mut roles = vec![None; self.nodes];
        for (node, role) in self.roles {
            builder = builder.role(node, &role);
            roles[node] = Some(role);
        }
        Sim {
            world: builder.build(),
            roles,
            clock: Rc::new(Clock::default()),
            tasks: Vec::new(),
            queue: Arc::new(Mutex::new(WakeQueue::default())),
            failure: None,
            killed: Vec::new(),
            seed: self.seed,
        }
    }
}

/// What a node task gets: the node's verbs context and environment.
pub struct Node {
    /// A verbs context on the node's HCA (every task of a node shares it).
    pub ctx: Context,
    /// Virtual time and timers.
    pub env: SimEnv,
    /// The node's index.
    pub id: usize,
    /// Its IPv4 address (10.0.0.1 for node 0, ...: [`crate::world::node_ip`]).
    pub ip: Ipv4Addr,
    /// Its role ([`SimBuilder::role`]), if any.
    pub role: Option<String>,
}

/// Tasks woken, in wake order, each once.
#[derive(Default)]
struct WakeQueue {
    order: VecDeque<usize>,
    queued: BTreeSet<usize>,
}

struct TaskWaker {
    id: usize,
    queue: Arc<Mutex<WakeQueue>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.queued.insert(self.id) {
            q.order.push_back(self.id);
        }
    }
}

struct Task {
    name: String,
    node: usize,
    daemon: bool,
    future: Option<Pin<Box<dyn Future<Output = ()>>>>,
    waker: Waker,
    /// Set when its node's process was killed ([`Sim`] dropped it).
    killed: Rc<Cell<bool>>,
}

/// A spawned task's result ([`Sim::spawn`]).
pub struct JoinHandle<T> {
    name: String,
    slot: Rc<RefCell<Option<T>>>,
    killed: Rc<Cell<bool>>,
}

impl<T> JoinHandle<T> {
    /// Whether the task has returned (and its output not taken yet).
    pub fn is_finished(&self) -> bool {
        self.slot.borrow().is_some()
    }

    /// Whether the task was stopped because a `crash` with `exit` killed
    /// its node's process (its future dropped where it waited; no output).
    pub fn was_killed(&self) -> bool {
        self.killed.get()
    }

    /// Takes the task's output; an error if it has not returned (or the
    /// output was taken).
    pub fn output(&self) -> Result<T, Unfinished> {
        self.slot.borrow_mut().take().ok_or_else(|| Unfinished(self.name.clone()))
    }
}

/// [`JoinHandle::output`] of a task that did not return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished(pub String);

impl fmt::Display for Unfinished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {} has not returned", self.0)
    }
}

impl std::error::Error for Unfinished {}

/// Why [`Sim::run`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Tasks wait and nothing will ever wake them: no task is ready, no
    /// packet is in flight, no HCA timer, port deadline or sleep is
    /// pending.
    Deadlock {
        /// The virtual time.
        at: Duration,
        /// The waiting tasks: `name (node n)`, in spawn order.
        waiting: Vec<String>,
    },
    /// The next event is past the run's limit.
    Timeout {
        /// The limit.
        limit: Duration,
        /// The tasks still running.
        waiting: Vec<String>,
    },
    /// A task panicked (the panic was caught; the message is its payload).
    Panic {
        /// `name (node n)`.
        task: String,
        /// The virtual time.
        at: Duration,
        /// The panic's message.
        message: String,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Deadlock { at, waiting } => {
                write!(f, "deadlock at {at:?}: waiting forever: {}", waiting.join(", "))
            }
            Failure::Timeout { limit, waiting } => {
                write!(f, "timeout: still running after {limit:?}: {}", waiting.join(", "))
            }
            Failure::Panic { task, at, message } => {
                write!(f, "task {task} panicked at {at:?}: {message}")
            }
        }
    }
}

impl std::error::Error for Failure {}

/// What one step of the loop did.
enum Advance {
    /// Tasks polled, or time moved.
    Progress,
    /// Nothing will ever happen.
    Idle,
    /// The next event is after the limit (nothing was done).
    Beyond,
}

/// A deterministic simulation: nodes (HCAs on the simulated fabric, from
/// [`crate::world`]) and async tasks on them, run in virtual time on one
/// thread. The whole run is a function of the seed: same seed, same
/// [`Sim::trace_hash`], same outputs.
pub struct Sim {
    world: World<SharedHca>,
    roles: Vec<Option<String>>,
    clock: Rc<Clock>,
    tasks: Vec<Task>,
    queue: Arc<Mutex<WakeQueue>>,
    failure: Option<Failure>,
    seed: u64,
    /// The tasks a node's exit stopped: `name (node n) at <time>`.
    killed: Vec<String>,
}

impl Sim {
    /// A builder: 2 nodes, [`FabricConfig::new`]`(seed)` with
    /// [`DEFAULT_LATENCY_JITTER`] (so each seed is another interleaving of
    /// the nodes' traffic), no scenario.
    pub fn builder(seed: u64) -> SimBuilder {
        SimBuilder {
            seed,
            nodes: 2,
            fabric: FabricConfig {
                latency_jitter_ns: DEFAULT_LATENCY_JITTER.as_nanos() as u64,
                ..FabricConfig::new(seed)
            },
            hca: None,
            scenario: None,
            roles: Vec::new(),
        }
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Spawns a task on node `node`: `f` gets the [`Node`] and returns the
    /// future. Tasks need not be `Send` (one thread); they are first polled
    /// in spawn order, then in the order they are woken.
    pub fn spawn<F, Fut>(&mut self, node: usize, name: &str, f: F) -> JoinHandle<Fut::Output>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future + 'static,
    {
        self.spawn_task(node, name, false, f)
    }

    /// Like [`Sim::spawn`], for a task [`Sim::run`] does not wait for (a
    /// server that loops forever): the run ends when every other task has
    /// returned.
    pub fn spawn_daemon<F, Fut>(&mut self, node: usize, name: &str, f: F) -> JoinHandle<Fut::Output>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future + 'static,
    {
        self.spawn_task(node, name, true, f)
    }

    fn spawn_task<F, Fut>(
        &mut self,
        node: usize,
        name: &str,
        daemon: bool,
        f: F,
    ) -> JoinHandle<Fut::Output>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future + 'static,
    {
        let host = &self.world.hosts[node];
        let handle = Node {
            ctx: host.ctx.clone(),
            env: SimEnv { clock: self.clock.clone() },
            id: node,
            ip: host.ip,
            role: self.roles[node].clone(),
        };
        let slot = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let killed = Rc::new(Cell::new(false));
        let future = f(handle);
        let id = self.tasks.len();
        let waker = Waker::from(Arc::new(TaskWaker { id, queue: self.queue.clone() }));
        waker.wake_by_ref();
        self.tasks.push(Task {
            name: name.to_owned(),
            node,
            daemon,
            future: Some(Box::pin(async move {
                let output = future.await;
                *out.borrow_mut() = Some(output);
            })),
            waker,
            killed: killed.clone(),
        });
        JoinHandle { name: name.to_owned(), slot, killed }
    }

    /// A lossless side channel between two nodes' tasks ([`SimOob`]).
    pub fn oob_pair(&mut self, a: usize, b: usize) -> (SimOob, SimOob) {
        assert!(a < self.world.hosts.len() && b < self.world.hosts.len(), "oob_pair: no such node");
        oob::pair()
    }

    /// The world: the fabric (rules, outages, counters, firings) and the
    /// hosts (each HCA).
    pub fn world(&mut self) -> &mut World<SharedHca> {
        &mut self.world
    }

    /// The virtual time since the start.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.world.now().as_nanos())
    }

    /// The fabric's trace hash: every packet, drop, delay, firing and
    /// device fault so far.
    pub fn trace_hash(&self) -> u64 {
        self.world.fabric.trace_hash()
    }

    /// The failure a step met (a task's panic), if any.
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// One step of the loop: polls the tasks that are ready, or else moves
    /// the fabric to its next event (or the first sleep's end) and fires
    /// the timers due. `false` when nothing will ever happen again.
    pub fn step(&mut self) -> bool {
        !matches!(self.advance(Instant::FAR_FUTURE), Advance::Idle)
    }

    /// Runs until every task spawned with [`Sim::spawn`] has returned, or
    /// fails: a deadlock, virtual time past `limit`, a task's panic.
    pub fn run(&mut self, limit: Duration) -> Result<Report, Failure> {
        let limit_ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        let deadline = self.world.now().plus_nanos(limit_ns);
        let result = loop {
            if let Some(failure) = self.failure.take() {
                break Err(failure);
            }
            if self.tasks.iter().all(|t| t.daemon || t.future.is_none()) {
                break Ok(self.report());
            }
            match self.advance(deadline) {
                Advance::Progress => {}
                Advance::Idle => {
                    break Err(Failure::Deadlock { at: self.now(), waiting: self.waiting() })
                }
                Advance::Beyond => break Err(Failure::Timeout { limit, waiting: self.waiting() }),
            }
        };
        crate::check::record_trace_hash(self.trace_hash());
        result
    }

    /// What happened so far: firings, completions per node, the trace hash.
    pub fn report(&self) -> Report {
        Report::of(&self.world, self.waiting(), self.killed.clone())
    }

    /// The unfinished tasks, in spawn order.
    fn waiting(&self) -> Vec<String> {
        self.tasks
            .iter()
            .filter(|t| t.future.is_some())
            .map(|t| format!("{} (node {})", t.name, t.node))
            .collect()
    }

    /// One turn of the loop, never past `deadline` ([`Instant::FAR_FUTURE`]:
    /// no bound).
    fn advance(&mut self, deadline: Instant) -> Advance {
        if self.poll_ready() {
            return Advance::Progress;
        }
        // No task is ready: let the fabric take what they posted, then wake
        // whoever that completed at once.
        self.world.take_posted();
        self.stop_exited();
        if self.poll_ready() {
            return Advance::Progress;
        }
        let fabric = self.world.fabric.next_event();
        let timer = self.clock.first_timer();
        let Some(next) = fabric.into_iter().chain(timer).min() else {
            return Advance::Idle;
        };
        if next > deadline {
            return Advance::Beyond;
        }
        // The fabric's next event, or the first sleep's end if that comes
        // first (the fabric's event first on a tie).
        let until = timer.map_or(deadline, |t| t.min(deadline));
        self.world.advance(until, Stop::FirstEvent);
        self.stop_exited();
        self.clock.now.set(self.world.now());
        self.clock.fire_due();
        Advance::Progress
    }

    /// Drops the tasks of every node whose process a `crash` with `exit`
    /// killed (as SIGKILL ends a process's threads where they are): their
    /// futures are dropped unfinished, their handles say
    /// [`JoinHandle::was_killed`], the report lists them.
    fn stop_exited(&mut self) {
        for exit in self.world.take_exits() {
            let at = Duration::from_nanos(exit.at.as_nanos());
            for task in self.tasks.iter_mut().filter(|t| t.node == exit.node) {
                if task.future.take().is_some() {
                    task.killed.set(true);
                    self.killed.push(format!("{} (node {}) at {at:?}", task.name, task.node));
                }
            }
        }
    }

    /// Polls every task woken, in wake order; whether any was.
    fn poll_ready(&mut self) -> bool {
        self.clock.now.set(self.world.now());
        let ready: Vec<usize> = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.queued.clear();
            q.order.drain(..).collect()
        };
        for &id in &ready {
            if self.failure.is_some() {
                break;
            }
            let task = &mut self.tasks[id];
            let Some(future) = task.future.as_mut() else { continue };
            let mut cx = TaskContext::from_waker(&task.waker);
            match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx))) {
                Ok(Poll::Pending) => {}
                Ok(Poll::Ready(())) => task.future = None,
                Err(payload) => {
                    let message = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "(not a string)".to_owned());
                    let task_name = format!("{} (node {})", task.name, task.node);
                    task.future = None;
                    let at = Duration::from_nanos(self.world.now().as_nanos());
                    self.failure = Some(Failure::Panic { task: task_name, at, message });
                }
            }
        }
        !ready.is_empty()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        crate::check::record_trace_hash(self.trace_hash());
        // Tasks hold verbs objects of the hosts: drop them first.
        self.tasks.clear();
    }
}
