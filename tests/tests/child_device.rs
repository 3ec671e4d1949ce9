//! The seam, proved: the HCA runs in a child process, with its own
//! mapping of the memfd that holds the rings, the doorbell records and the
//! application's buffers, and executes the WQEs this process posts through
//! the ordinary verbs code (`uroce_verbs`). Commands, kicks and events
//! cross a Unix socket; the work itself never does.
//!
//! Two RC QPs of the one device talk to each other (the device loops its
//! packets back into itself): SENDs across packets and with immediates,
//! RDMA WRITE, READ, FETCH_ADD and COMPARE_SWAP, a chain of posts, an
//! error completion, and every byte checked through this process's mapping.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use uroce_device::command::QpCap;
use uroce_device::types::{Access, QpType, WrOpcode};
use uroce_hca::config::HcaConfig;
use uroce_net::remote::{serve_one, RemoteDevice, ServeConfig};
use uroce_verbs::connect::{to_init, to_rts, Remote, Tuning};
use uroce_verbs::{Context, Cq, Mr, Mtu, Qp, QpInitAttr, RecvWr, RemoteTarget, SendWr, WcStatus};
use uroce_verbs::{WcOpcode, WorkCompletion};

const CHILD_ENV: &str = "UROCE_CHILD_DEVICE_SOCKET";
const ALL: Access = Access(1 | 2 | 4 | 8);

/// The child: a device listening at the path in [`CHILD_ENV`], serving one
/// driver, then exiting.
#[test]
fn device_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind the device socket");
    let config =
        ServeConfig { addr: IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)), hca: HcaConfig::default() };
    let result = serve_one(&listener, &config);
    std::process::exit(if result.is_ok() {
        0
    } else {
        eprintln!("device: {result:?}");
        1
    });
}

/// Starts the device process and waits until it listens.
fn start_device(socket: &Path) -> Child {
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "device_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, socket)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the device");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the device never listened");
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

fn qp(ctx: &Context, pd: &uroce_verbs::Pd, cq: &Cq) -> Qp {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let _ = ctx;
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    })
    .expect("create QP")
}

/// Polls until `count` completions are in, within a deadline.
fn wait(cq: &Cq, count: usize) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < count {
        got.extend(cq.poll(count - got.len()).expect("poll"));
        assert!(Instant::now() < deadline, "{} of {count} completions: {got:?}", got.len());
        std::thread::yield_now();
    }
    got
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

fn signaled(mut wr: SendWr) -> SendWr {
    wr.flags = wr.flags | uroce_device::types::SendFlags::SIGNALED;
    wr
}

fn rdma(
    wr_id: u64,
    opcode: WrOpcode,
    local: &Mr,
    at: u64,
    len: u32,
    remote: &Mr,
    remote_at: u64,
) -> SendWr {
    let mut wr = SendWr::new(wr_id, opcode);
    wr.sg_list = vec![local.sge(at, len)];
    wr.remote = RemoteTarget { addr: remote.addr() + remote_at, rkey: remote.rkey() };
    signaled(wr)
}

#[test]
fn an_hca_in_a_child_process_executes_what_this_process_posts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("device.sock");
    let mut device_process = start_device(&socket);
    let device = RemoteDevice::connect(&socket, 64 << 20).expect("connect to the device");
    assert_ne!(device.device_pid(), std::process::id(), "the HCA runs in another process");
    assert_eq!(device.device_pid(), device_process.id());

    let ctx = Context::open(&device);
    let attr = ctx.query_device().expect("query the device");
    assert!(attr.max_qp > 0);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let (a, b) = (qp(&ctx, &pd, &cq), qp(&ctx, &pd, &cq));
    let gid = ctx.query_gid(1).unwrap();
    let tuning = Tuning {
        mtu: Mtu::Mtu1024,
        sq_psn: 100,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1,
        rd_atomic: 4,
        sgid_index: 1,
        hop_limit: 64,
        sl: 0,
    };
    for (me, peer, psn) in [(&a, &b, 500), (&b, &a, 100)] {
        to_init(me, ALL, 0).unwrap();
        let remote = Remote { gid, qpn: peer.qpn(), psn };
        to_rts(me, Some(remote), &Tuning { sq_psn: if psn == 500 { 100 } else { 500 }, ..tuning })
            .unwrap();
    }
    let mr_a = pd.alloc_mr(1 << 20, ALL).unwrap();
    let mr_b = pd.alloc_mr(1 << 20, ALL).unwrap();
    for mr in [&mr_a, &mr_b] {
        assert!(device.shared_memory().contains(mr.addr()), "the buffers are in the shared memfd");
    }

    // A SEND across three packets, and one with an immediate.
    let message = pattern(3000, 1);
    mr_a.write(0, &message).unwrap();
    b.post_recv(&[
        RecvWr { wr_id: 10, sg_list: vec![mr_b.sge(0, 4096)] },
        RecvWr { wr_id: 11, sg_list: vec![mr_b.sge(4096, 64)] },
    ])
    .unwrap();
    let mut send = SendWr::new(1, WrOpcode::Send);
    send.sg_list = vec![mr_a.sge(0, 3000)];
    let mut with_imm = SendWr::new(2, WrOpcode::SendWithImm);
    with_imm.sg_list = vec![mr_a.sge(0, 16)];
    with_imm.imm_or_inv = 0xfeed;
    a.post_send(&[signaled(send), signaled(with_imm)]).unwrap();
    let mut done = wait(&cq, 4);
    done.sort_by_key(|c| c.wr_id);
    let got: Vec<_> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (10, WcStatus::Success),
            (11, WcStatus::Success)
        ]
    );
    assert_eq!(done[2].byte_len, 3000);
    assert_eq!(done[3].imm_or_inv, 0xfeed);
    assert_eq!(mr_b.read_vec(0, 3000).unwrap(), message, "the child's DMA landed in our mapping");

    // WRITE, READ back, and atomics.
    let block = pattern(10_000, 9);
    mr_a.write(8192, &block).unwrap();
    a.post_send(&[rdma(3, WrOpcode::RdmaWrite, &mr_a, 8192, 10_000, &mr_b, 65536)]).unwrap();
    assert_eq!(wait(&cq, 1)[0].status, WcStatus::Success);
    assert_eq!(mr_b.read_vec(65536, 10_000).unwrap(), block);
    a.post_send(&[rdma(4, WrOpcode::RdmaRead, &mr_a, 200_000, 10_000, &mr_b, 65536)]).unwrap();
    assert_eq!(wait(&cq, 1)[0].status, WcStatus::Success);
    assert_eq!(mr_a.read_vec(200_000, 10_000).unwrap(), block);
    mr_b.write(4096 * 10, &40u64.to_le_bytes()).unwrap();
    let mut fetch_add = rdma(5, WrOpcode::AtomicFetchAndAdd, &mr_a, 300_000, 8, &mr_b, 4096 * 10);
    fetch_add.compare_add = 2;
    let mut cas = rdma(6, WrOpcode::AtomicCmpAndSwp, &mr_a, 300_008, 8, &mr_b, 4096 * 10);
    cas.compare_add = 42;
    cas.swap = 7;
    a.post_send(&[fetch_add, cas]).unwrap();
    let done = wait(&cq, 2);
    assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    assert_eq!(mr_a.read_vec(300_000, 8).unwrap(), 40u64.to_le_bytes());
    assert_eq!(mr_a.read_vec(300_008, 8).unwrap(), 42u64.to_le_bytes());
    assert_eq!(mr_b.read_vec(4096 * 10, 8).unwrap(), 7u64.to_le_bytes());

    // Many posts, one at a time and chained: every WR completes, in order,
    // whether its post kicked the device or found it already looking.
    let mut expected = Vec::new();
    for round in 0..20u64 {
        let chain: Vec<SendWr> = (0..3)
            .map(|k| {
                let id = 100 + round * 3 + k;
                expected.push(id);
                rdma(id, WrOpcode::RdmaWrite, &mr_a, 8192, 512, &mr_b, 512 * (id % 64))
            })
            .collect();
        a.post_send(&chain).unwrap();
    }
    let done = wait(&cq, expected.len());
    assert!(done.iter().all(|c| c.status == WcStatus::Success && c.opcode == WcOpcode::RdmaWrite));
    assert_eq!(done.iter().map(|c| c.wr_id).collect::<Vec<_>>(), expected, "in posting order");

    // An error: a bad R_Key is a remote access error, and the QP's later
    // WRs flush.
    let mut bad = rdma(900, WrOpcode::RdmaWrite, &mr_a, 0, 8, &mr_b, 0);
    bad.remote.rkey.0 ^= 0x55;
    a.post_send(&[bad, rdma(901, WrOpcode::RdmaWrite, &mr_a, 0, 8, &mr_b, 0)]).unwrap();
    let done = wait(&cq, 2);
    let got: Vec<_> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, vec![(900, WcStatus::RemAccessErr), (901, WcStatus::WrFlushErr)]);
    let event = (0..200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(5));
        ctx.next_event()
    });
    assert!(event.is_some(), "the device's asynchronous event crossed the socket");

    // The driver goes: the device process ends by itself.
    drop((a, b, mr_a, mr_b, cq, pd, ctx, device));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = device_process.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the device outlived its driver");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the device ended cleanly: {status:?}");
}

#[test]
fn a_command_to_a_dead_device_fails_instead_of_hanging() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("device.sock");
    let mut device_process = start_device(&socket);
    let device = RemoteDevice::connect(&socket, 1 << 20).expect("connect");
    let ctx = Context::open(&device);
    device_process.kill().unwrap();
    device_process.wait().unwrap();
    let started = Instant::now();
    let err = ctx.alloc_pd().err().expect("no device to answer");
    assert!(err.to_string().contains("gone"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(11));
    let cq_err = ctx.create_cq(16).err().expect("refused");
    assert!(
        cq_err.to_string().contains("gone") || cq_err.to_string().contains("closed"),
        "{cq_err}"
    );
}
