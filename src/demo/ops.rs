//! What the demo's steps do with the verbs: build WRs, post them, wait for
//! completions and check them, read and check the data.

use super::*;

pub(super) fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Bytes that differ from position to position and from step to step.
pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

/// `RdmaWriteWithImm` → `RDMA_WRITE_WITH_IMM`, as libibverbs spells it.
pub(super) fn upper_snake(name: &str) -> String {
    let mut s = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

pub(super) fn describe_wc(wc: &WorkCompletion) -> String {
    let mut s = format!(
        "{} {} wr_id {}",
        upper_snake(&format!("{:?}", wc.opcode)),
        upper_snake(&format!("{:?}", wc.status)),
        wc.wr_id
    );
    if wc.status == WcStatus::Success && wc.opcode.raw() >= 128 {
        let _ = write!(s, ", byte_len {}", wc.byte_len);
    }
    if wc.flags.contains(WcFlags::WITH_IMM) {
        let _ = write!(s, ", imm 0x{:08x}", wc.imm_or_inv);
    }
    if wc.flags.contains(WcFlags::GRH) {
        let _ = write!(s, ", src_qp {}, GRH", wc.src_qp);
    }
    s
}

pub(super) fn wr_name(op: WrOpcode) -> String {
    upper_snake(&format!("{op:?}"))
}

pub(super) fn post_send(qp: &Qp, wrs: &[SendWr]) -> Result<(), String> {
    qp.post_send(wrs).map_err(|(i, e)| format!("post_send (WR {i}): {e}"))
}

pub(super) fn post_recv(qp: &Qp, wrs: &[RecvWr]) -> Result<(), String> {
    qp.post_recv(wrs).map_err(|(i, e)| format!("post_recv (WR {i}): {e}"))
}

/// Waits for `n` completions on `node`'s CQ.
pub(super) fn wait(node: &Node, n: usize) -> Vec<WorkCompletion> {
    wait_cq(&node.cq, n, WAIT)
}

/// Waits for `at_b` completions on B, then `at_a` on A. Between the two,
/// B's device is stepped once, as an application's next verbs call would:
/// the runtime holds the ACKs of a receive the application drove until
/// then, and its background thread may sleep through them.
pub(super) fn wait_both(
    p: &Phase,
    at_b: usize,
    at_a: usize,
) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    let got_b = wait(&p.b, at_b);
    p.b.dev.progress();
    (got_b, wait(&p.a, at_a))
}

/// Checks completions: how many, and each one's status and opcode.
pub(super) fn expect(
    who: &str,
    got: &[WorkCompletion],
    want: &[(WcStatus, Wc)],
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{who}: {} of {} completions within {:?}",
            got.len(),
            want.len(),
            WAIT
        ));
    }
    for (wc, (status, opcode)) in got.iter().zip(want) {
        if wc.status != *status || wc.opcode != *opcode {
            return Err(format!(
                "{who}: expected {} {}, got {}",
                upper_snake(&format!("{opcode:?}")),
                upper_snake(&format!("{status:?}")),
                describe_wc(wc)
            ));
        }
    }
    Ok(())
}

/// Compares what arrived with what was sent and prints the verdict.
pub(super) fn check(
    out: &mut dyn Write,
    what: &str,
    got: &[u8],
    want: &[u8],
) -> Result<(), String> {
    checks(out, &[(what, got, want)])
}

/// Compares several (what, arrived, sent) triples; one line for all.
pub(super) fn checks(out: &mut dyn Write, items: &[(&str, &[u8], &[u8])]) -> Result<(), String> {
    let mut oks = Vec::new();
    for (what, got, want) in items {
        match got.iter().zip(want.iter()).position(|(g, w)| g != w) {
            None if got.len() == want.len() => oks.push(format!("{what} ({} B)", want.len())),
            at => {
                let at = at.unwrap_or(got.len().min(want.len()));
                let why = format!(
                    "data MISMATCH in {what}: first difference at byte {at} (sent {:?}, got {:?})",
                    want.get(at),
                    got.get(at)
                );
                say!(out, "    check {why}");
                return Err(why);
            }
        }
    }
    say!(out, "    check data ok: {}", oks.join(", "));
    Ok(())
}

pub(super) fn read(mr: &Mr, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    mr.read_vec(offset, len).map_err(|e| format!("reading the MR: {e}"))
}

pub(super) fn write(mr: &Mr, offset: u64, data: &[u8]) -> Result<(), String> {
    mr.write(offset, data).map_err(|e| format!("writing the MR: {e}"))
}

/// Waits (bounded) until `mr` holds `want` at `offset`: for UC WRITEs,
/// which complete nowhere on the receiving side.
pub(super) fn wait_for_bytes(mr: &Mr, offset: u64, want: &[u8]) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = read(mr, offset, want.len())?;
        if got == want || Instant::now() >= deadline {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

pub(super) fn send_wr(wr_id: u64, opcode: WrOpcode, mr: &Mr, offset: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, opcode);
    wr.sg_list = vec![mr.sge(offset, len)];
    wr.flags = SendFlags::SIGNALED;
    wr
}

pub(super) fn recv_wr(wr_id: u64, mr: &Mr, offset: u64, len: u32) -> RecvWr {
    RecvWr { wr_id, sg_list: vec![mr.sge(offset, len)] }
}

pub(super) fn rdma_wr(
    wr_id: u64,
    opcode: WrOpcode,
    local: (&Mr, u64, u32),
    remote: (u64, Rkey),
) -> SendWr {
    let mut wr = send_wr(wr_id, opcode, local.0, local.1, local.2);
    wr.remote = RemoteTarget { addr: remote.0, rkey: remote.1 };
    wr
}
