//! The client's side of `uroce opcodes`: it runs the steps one by one and
//! checks each completion and what READs and atomics brought back.

use super::*;

impl Session<'_> {
    pub(super) fn client_run(&mut self, stream: &mut OobStream) -> Result<(), String> {
        self.mw_rkeys = exchange::read_u32s::<2>(stream)?;
        let steps = self.steps;
        for (i, s) in steps.iter().enumerate() {
            if i > 0 && steps[i - 1].qp != QpKind::Rc && s.qp == QpKind::Rc {
                // Let the unreliable steps land before the RC ones.
                std::thread::sleep(Duration::from_millis(20));
            }
            self.run_step(i as u32 + 1)?;
        }
        stream.write_all(exchange::DONE).map_err(|e| exchange::io_error("tcp write", e))?;
        stream.flush().map_err(|e| exchange::io_error("tcp write", e))?;
        let [verdict] = exchange::read_u32s::<1>(stream)?;
        say!(self, "server reported {verdict} failures");
        if verdict != 0 {
            self.fails += 1;
        }
        Ok(())
    }

    /// The work request of step `n` (its payload already in place).
    pub(super) fn step_wr(&mut self, n: u32, s: &Step, payload: Option<Vec<u8>>) -> SendWr {
        let len = s.bytes(self.mtu_bytes);
        self.next_wr_id += 1;
        let mut wr = SendWr::new(self.next_wr_id, s.op);
        wr.flags = SendFlags::SIGNALED;
        if s.flags & steps::F_SOLICITED != 0 {
            wr.flags = wr.flags | SendFlags::SOLICITED;
        }
        let local = if s.is_send() || s.writes_slot() { steps::OFF_SRC } else { steps::OFF_DST };
        match payload {
            Some(bytes) if s.flags & steps::F_INLINE != 0 => wr.inline_data = Some(bytes),
            // A FLUSH moves no data: its length is the range's.
            _ if s.op == WrOpcode::Flush => {}
            _ if len > 0 => wr.sg_list = vec![self.mr.sge(local, len)],
            _ => {}
        }
        if s.has_imm() {
            wr.imm_or_inv = s.imm;
        }
        if s.op == WrOpcode::SendWithInv {
            wr.imm_or_inv = self.mw_rkeys[usize::from(s.key == steps::Key::Mw1)];
        }
        let base = self.peer.addr;
        let addr = match s.target {
            Target::FetchAdd | Target::Atomics => base.wrapping_add(steps::OFF_ATOMIC),
            Target::CompareSwap => base.wrapping_add(steps::OFF_ATOMIC + 8),
            Target::Previous => base.wrapping_add(steps::slot_offset(n - 1)),
            _ => base.wrapping_add(steps::slot_offset(n)),
        };
        let rkey = match s.key {
            steps::Key::Bad => self.peer.rkey ^ 0x00a5_a500,
            _ => self.peer.rkey,
        };
        if s.writes_slot() || s.is_read() || s.is_atomic() || s.op == WrOpcode::Flush {
            wr.remote = RemoteTarget { addr, rkey: Rkey(rkey) };
        }
        if s.op == WrOpcode::Flush {
            // The WQE's FLUSH fields: the range's length, and (selectivity
            // level << 8) | placement type.
            wr.compare_add = u64::from(len);
            wr.swap = s.swap;
        }
        if s.is_atomic() {
            wr.compare_add = s.compare_add;
            wr.swap = s.swap;
        }
        if s.qp == QpKind::Ud {
            let ah = self.ah.as_ref().map_or(0, |ah| ah.index());
            wr.ud = Some((ah, Qpn::new(self.peer.ud_qpn), Qkey(steps::UD_QKEY)));
        }
        wr
    }

    pub(super) fn run_step(&mut self, n: u32) -> Result<(), String> {
        let s = &self.steps[n as usize - 1];
        let len = s.bytes(self.mtu_bytes);
        let payload = if s.is_send() || s.writes_slot() {
            let mut bytes = steps::pattern_bytes(n, len);
            if self.args.corrupt_step.contains(&n) && len > 0 {
                bytes[len as usize / 2] ^= 0xff;
                say!(self, "(corrupting byte {} of the payload of step {n})", len / 2);
            }
            self.write(steps::OFF_SRC, &bytes)?;
            Some(bytes)
        } else if s.op == WrOpcode::Flush {
            None
        } else {
            self.write(steps::OFF_DST, &vec![steps::DST_FILL; (len + steps::GUARD) as usize])?;
            None
        };
        let wr = self.step_wr(n, s, payload);
        let rnr_before = self.dev.counters().rcvd_rnr_err;
        let qpn = self.qp(s.qp).qpn().value();
        say!(self, "STEP {n:2} {:<30} qp=0x{qpn:x} len={len}", s.name);
        if let Err((_, e)) = self.qp(s.qp).post_send(std::slice::from_ref(&wr)) {
            self.bad(format!("step {n}: post_send failed: {e}"));
            return Ok(());
        }
        let Some(wc) = self.poll1(STEP_WAIT)? else {
            self.bad(format!("step {n}: TIMEOUT waiting for the completion"));
            return Ok(());
        };
        self.show("client", &wc);
        if wc.wr_id != wr.wr_id {
            self.bad(format!("step {n}: completion for wr_id {}, want {}", wc.wr_id, wr.wr_id));
        }
        let want_op = match s.op {
            WrOpcode::AtomicWrite => Some(WcOpcode::AtomicWrite),
            WrOpcode::Flush => Some(WcOpcode::Flush),
            _ => None,
        };
        if let (Some(want), WcStatus::Success) = (want_op, wc.status) {
            if wc.opcode != want {
                self.bad(format!(
                    "step {n}: completion opcode {}, want {}",
                    wc_opcode_name(wc.opcode),
                    wc_opcode_name(want)
                ));
            }
        }
        if wc.status != s.expect {
            self.bad(format!(
                "step {n}: status {}, want {}",
                wc_status_str(wc.status),
                wc_status_str(s.expect)
            ));
            return Ok(());
        }
        if wc.status != WcStatus::Success {
            return Ok(());
        }
        let before = self.fails;
        let what = format!("step {n} data read");
        if s.is_read() {
            let bytes = self.read(steps::OFF_DST, u64::from(len + steps::GUARD))?;
            let result = if s.target == Target::Atomics {
                let mut want = steps::FA_FINAL.to_le_bytes().to_vec();
                want.extend_from_slice(&steps::CAS_SWAP.to_le_bytes());
                steps::check_payload(&what, &bytes, len as usize, |i| want[i], steps::DST_FILL)
            } else if s.target == Target::Previous {
                // What the previous step put into its slot.
                let want = |i: usize| steps::pattern(n - 1, i as u32);
                steps::check_payload(&what, &bytes, len as usize, want, steps::DST_FILL)
            } else {
                let want = |i: usize| steps::pattern(n, i as u32);
                steps::check_payload(&what, &bytes, len as usize, want, steps::DST_FILL)
            };
            if let Err(problem) = result {
                self.bad(problem);
            }
        } else if s.is_atomic() {
            let bytes = self.read(steps::OFF_DST, u64::from(8 + steps::GUARD))?;
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[..8]);
            let got = u64::from_le_bytes(word);
            if got != s.expect_orig {
                self.bad(format!(
                    "step {n}: returned original 0x{got:016x}, want 0x{:016x}",
                    s.expect_orig
                ));
            } else if let Err(problem) =
                steps::check_payload(&what, &bytes[8..], 0, |_| 0, steps::DST_FILL)
            {
                self.bad(problem);
            }
        }
        if s.flags & steps::F_RNR != 0 {
            let after = self.dev.counters().rcvd_rnr_err;
            if after == rnr_before {
                self.bad(format!(
                    "step {n}: completed without an RNR NAK (rcvd_rnr_err stayed {after})"
                ));
            } else {
                say!(self, "  rnr naks received: {}", after - rnr_before);
            }
        }
        if s.is_read()
            || s.is_atomic()
            || s.op == WrOpcode::AtomicWrite
            || s.flags & steps::F_RNR != 0
        {
            let verdict = if self.fails == before { "OK" } else { "FAILED" };
            say!(self, "CHECK step {n:2} {:<30} {verdict}", s.name);
        }
        Ok(())
    }
}
