//! The server's side of `uroce opcodes`: it prepares the memory and the
//! receives, binds the windows, and checks every receive and, at the end,
//! its memory.

use super::*;

impl Session<'_> {
    /// The atomic words and the READ sources, then the receives of every
    /// step up to the RNR step.
    pub(super) fn server_prepare(&mut self) -> Result<(), String> {
        let mut words = steps::FA_INIT.to_le_bytes().to_vec();
        words.extend_from_slice(&steps::CAS_INIT.to_le_bytes());
        self.write(steps::OFF_ATOMIC, &words)?;
        for (i, s) in self.steps.iter().enumerate() {
            let n = i as u32 + 1;
            if !s.is_read() || s.target != Target::Slot {
                continue;
            }
            let len = s.bytes(self.mtu_bytes);
            let mut bytes = steps::pattern_bytes(n, len);
            if self.args.corrupt_step.contains(&n) && len > 0 {
                bytes[len as usize / 2] ^= 0xff;
                say!(self, "(corrupting byte {} of the READ source of step {n})", len / 2);
            }
            self.write(steps::slot_offset(n), &bytes)?;
        }
        let slots = steps::receive_slots_of(self.steps);
        let mut rnr_seen = false;
        for (i, s) in self.steps.iter().enumerate() {
            rnr_seen |= s.flags & steps::F_RNR != 0;
            let Some(slot) = slots[i] else { continue };
            if s.qp == QpKind::Rc && rnr_seen {
                continue; // posted after the RNR window
            }
            let cap = match s.qp {
                QpKind::Ud => steps::GRH_LEN as u64 + 4096,
                _ => steps::SLOT,
            };
            self.post_recv(s.qp, steps::receive_offset(s, slot), cap, i as u64 + 1)?;
        }
        Ok(())
    }

    pub(super) fn post_recv(
        &self,
        kind: QpKind,
        offset: u64,
        len: u64,
        wr_id: u64,
    ) -> Result<(), String> {
        let wr = RecvWr { wr_id, sg_list: vec![self.mr.sge(offset, len as u32)] };
        self.qp(kind).post_recv(&[wr]).map_err(|(_, e)| format!("post_recv: {e}"))
    }

    /// The RC receives of the RNR step and after, and the spares.
    pub(super) fn server_post_after_rnr_window(&self) -> Result<(), String> {
        let slots = steps::receive_slots_of(self.steps);
        let mut rnr_seen = false;
        let mut last = 0;
        for (i, s) in self.steps.iter().enumerate() {
            rnr_seen |= s.flags & steps::F_RNR != 0;
            if let (true, QpKind::Rc, Some(slot)) = (rnr_seen, s.qp, slots[i]) {
                self.post_recv(
                    QpKind::Rc,
                    steps::receive_offset(s, slot),
                    steps::SLOT,
                    i as u64 + 1,
                )?;
                last = slot;
            }
        }
        for k in 0..steps::RC_SPARE {
            let offset = steps::OFF_RC_RECV + (last + 1 + k) * steps::SLOT;
            self.post_recv(QpKind::Rc, offset, steps::SLOT, steps::SPARE_ID + k)?;
        }
        Ok(())
    }

    /// Two type-2 windows over the MR, for the SEND_WITH_INVALIDATE steps.
    pub(super) fn bind_windows(&mut self) -> Result<(), String> {
        for i in 0..2 {
            let mw = self.pd.alloc_mw(2).map_err(|e| format!("alloc_mw: {e}"))?;
            // ibv_inc_rkey: the next 8-bit key.
            let key = (mw.rkey().0 as u8).wrapping_add(1);
            let (wr, rkey) = SendWr::bind_mw(
                900 + i,
                &mw,
                &self.mr,
                steps::OFF_MW,
                steps::MW_LEN,
                Access::REMOTE_WRITE,
                key,
            );
            self.rc.post_send(&[wr]).map_err(|(_, e)| format!("bind_mw: {e}"))?;
            match self.poll1(Duration::from_secs(5))? {
                Some(wc) if wc.status == WcStatus::Success => {}
                Some(wc) => {
                    return Err(format!("bind_mw completion: {}", wc_status_str(wc.status)))
                }
                None => return Err("bind_mw completion: none within 5 s".into()),
            }
            mw.set_rkey(rkey);
            self.mw_rkeys[i as usize] = rkey.0;
            self.mws.push(mw);
            say!(self, "bound MW type 2 rkey 0x{:08x}", rkey.0);
        }
        Ok(())
    }

    pub(super) fn server_run(&mut self, stream: &mut OobStream) -> Result<(), String> {
        self.bind_windows()?;
        exchange::write_u32s(stream, &self.mw_rkeys)?;
        let want_total = self.steps.iter().filter(|s| s.takes_recv()).count();
        let rc_before_rnr = steps::rc_receives_before_rnr_of(self.steps);
        let (mut got_total, mut got_rc) = (0, 0);
        let deadline = Instant::now() + RECEIVE_WAIT;
        while got_total < want_total && Instant::now() < deadline {
            let Some(wc) = self.poll1(Duration::from_secs(1))? else { continue };
            self.show("server", &wc);
            self.check_recv(&wc)?;
            got_total += 1;
            if wc.qp_num == self.rc.qpn() {
                got_rc += 1;
                if got_rc == rc_before_rnr {
                    // Every pre-posted RC receive is used: the client's next
                    // SEND meets an empty RQ and gets RNR NAKs.
                    std::thread::sleep(Duration::from_millis(steps::RNR_WINDOW_MS));
                    say!(
                        self,
                        "  server: posting more RC receives after {} ms (RNR window)",
                        steps::RNR_WINDOW_MS
                    );
                    self.server_post_after_rnr_window()?;
                }
            }
        }
        if got_total < want_total {
            self.bad(format!("only {got_total} of {want_total} receive completions"));
        }
        // The client finished (its last step breaks the RC connection).
        let mut done = [0u8; 4];
        stream.read_exact(&mut done).map_err(|e| exchange::io_error("tcp read", e))?;
        if &done != exchange::DONE {
            self.bad("the client's last message is not \"done\"".into());
        }
        self.check_memory()?;
        while let Some(wc) = self.poll1(DRAIN_WAIT)? {
            self.show("server(after)", &wc);
            // The spare RC receives are flushed when the bad rkey moves the
            // QP to the error state.
            if wc.status != WcStatus::WrFlushErr || wc.qp_num != self.rc.qpn() {
                self.bad("an unexpected completion after the last step".into());
            }
        }
        exchange::write_u32s(stream, &[self.fails])
    }

    /// Checks one receive completion against its step.
    pub(super) fn check_recv(&mut self, wc: &WorkCompletion) -> Result<(), String> {
        let Some(index) = (wc.wr_id as usize).checked_sub(1).filter(|i| *i < self.steps.len())
        else {
            self.bad(format!("a completion for receive {}, which no step uses", wc.wr_id));
            return Ok(());
        };
        let n = index as u32 + 1;
        let s = &self.steps[index];
        if wc.status != WcStatus::Success {
            self.bad(format!("step {n}: receive status {}", wc_status_str(wc.status)));
            return Ok(());
        }
        let before = self.fails;
        for problem in self.receive_problems(n, s, wc)? {
            self.bad(problem);
        }
        let verdict = if self.fails == before { "OK" } else { "FAILED" };
        say!(self, "CHECK step {n:2} {:<30} receive {verdict}", s.name);
        Ok(())
    }

    /// What is wrong with step `n`'s receive completion `wc` and its data.
    pub(super) fn receive_problems(
        &self,
        n: u32,
        s: &Step,
        wc: &WorkCompletion,
    ) -> Result<Vec<String>, String> {
        let mut problems = Vec::new();
        let len = s.bytes(self.mtu_bytes);
        let grh = if s.qp == QpKind::Ud { steps::GRH_LEN } else { 0 };
        let qpn = self.qp(s.qp).qpn();
        if wc.qp_num != qpn {
            problems.push(format!(
                "step {n}: receive on qp 0x{:x}, want 0x{:x}",
                wc.qp_num.value(),
                qpn.value()
            ));
        }
        let want_op = if s.op == WrOpcode::RdmaWriteWithImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        if wc.opcode != want_op {
            problems.push(format!(
                "step {n}: opcode {}, want {}",
                wc_opcode_name(wc.opcode),
                wc_opcode_name(want_op)
            ));
        }
        if wc.byte_len != len + grh {
            problems.push(format!("step {n}: byte_len {}, want {}", wc.byte_len, len + grh));
        }
        let with_imm = wc.flags.contains(WcFlags::WITH_IMM);
        if s.has_imm() && (!with_imm || wc.imm_or_inv != s.imm) {
            problems.push(format!(
                "step {n}: immediate {}0x{:08x}, want 0x{:08x}",
                if with_imm { "" } else { "(flag missing) " },
                wc.imm_or_inv,
                s.imm
            ));
        }
        if !s.has_imm() && with_imm {
            problems.push(format!("step {n}: an immediate flag on a message without one"));
        }
        if s.op == WrOpcode::SendWithInv {
            let want = self.mw_rkeys[usize::from(s.key == steps::Key::Mw1)];
            let flagged = wc.flags.contains(WcFlags::WITH_INV);
            if !flagged || wc.imm_or_inv != want {
                problems.push(format!(
                    "step {n}: invalidated rkey {}0x{:08x}, want 0x{want:08x}",
                    if flagged { "" } else { "(flag missing) " },
                    wc.imm_or_inv
                ));
            }
        }
        if s.qp == QpKind::Ud {
            if !wc.flags.contains(WcFlags::GRH) {
                problems.push(format!("step {n}: no GRH flag on a UD receive"));
            }
            if wc.src_qp.value() != self.peer.ud_qpn {
                problems.push(format!(
                    "step {n}: source QP 0x{:x}, want 0x{:x}",
                    wc.src_qp.value(),
                    self.peer.ud_qpn
                ));
            }
            let header = self.read(steps::OFF_UD_RECV, u64::from(steps::GRH_LEN))?;
            problems.extend(grh_problem(&header, &self.peer.gid, &self.me.gid));
        }
        if s.is_send() {
            let slot = steps::receive_slots_of(self.steps)[n as usize - 1].unwrap_or(0);
            let offset = steps::receive_offset(s, slot) + u64::from(grh);
            let bytes = self.read(offset, u64::from(len + steps::GUARD))?;
            let what = format!("step {n} received data");
            let want = |i: usize| steps::pattern(n, i as u32);
            if let Err(problem) =
                steps::check_payload(&what, &bytes, len as usize, want, steps::FILL)
            {
                problems.push(problem);
            }
        }
        Ok(problems)
    }

    /// After `done`: every WRITE target, and the atomic words.
    pub(super) fn check_memory(&mut self) -> Result<(), String> {
        for (i, s) in self.steps.iter().enumerate() {
            if !s.writes_slot() {
                continue;
            }
            let n = i as u32 + 1;
            let len = s.bytes(self.mtu_bytes);
            let bytes = self.read(steps::slot_offset(n), u64::from(len + steps::GUARD))?;
            let what = format!("step {n} target");
            let result = if s.expect == WcStatus::Success {
                steps::check_payload(
                    &what,
                    &bytes,
                    len as usize,
                    |i| steps::pattern(n, i as u32),
                    steps::FILL,
                )
            } else {
                // A NAKed WRITE (or ATOMIC_WRITE) writes nothing.
                steps::check_payload(&what, &bytes, 0, |_| steps::FILL, steps::FILL)
            };
            let before = self.fails;
            if let Err(problem) = result {
                self.bad(problem);
            }
            let verdict = if self.fails == before { "OK" } else { "FAILED" };
            say!(self, "CHECK step {n:2} {:<30} target {verdict}", s.name);
        }
        if !self.steps.iter().any(Step::is_atomic) {
            return Ok(()); // a set without FETCH_ADD and COMPARE_SWAP
        }
        let words = self.read(steps::OFF_ATOMIC, 16)?;
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&words[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let before = self.fails;
        if word(0) != steps::FA_FINAL {
            self.bad(format!(
                "FETCH_ADD word is 0x{:016x}, want 0x{:016x}",
                word(0),
                steps::FA_FINAL
            ));
        }
        if word(8) != steps::CAS_SWAP {
            self.bad(format!(
                "COMPARE_SWAP word is 0x{:016x}, want 0x{:016x}",
                word(8),
                steps::CAS_SWAP
            ));
        }
        let verdict = if self.fails == before { "OK" } else { "FAILED" };
        say!(self, "CHECK atomic words {verdict}");
        Ok(())
    }
}
