//! A `[[rule]]`: its match part, scope, window and action.

use super::*;

const MATCH_KEYS: &[&str] = &[
    "dir",
    "peer",
    "opcode",
    "class",
    "position",
    "qpn",
    "qp",
    "psn_offset",
    "message",
    "retransmit",
];
const PARAM_KEYS: &[&str] = &[
    "copies",
    "gap_us",
    "delay_us",
    "behind",
    "max_hold_us",
    "bit",
    "for_ms",
    "count",
    "target",
    "exit",
];
const OTHER_RULE_KEYS: &[&str] =
    &["name", "role", "device", "nth", "times", "chance", "after_ms", "until_ms", "action"];

/// Every action and the parameters it takes.
const ACTIONS: &[(&str, &[&str])] = &[
    ("drop", &[]),
    ("duplicate", &["copies", "gap_us"]),
    ("delay", &["delay_us"]),
    ("reorder", &["behind", "max_hold_us"]),
    ("corrupt", &["bit"]),
    ("link_down", &["for_ms"]),
    ("link_up", &[]),
    ("partition", &["for_ms"]),
    ("rnr", &["count", "target"]),
    ("fail_key", &["count", "target"]),
    ("dma_fault", &["count", "target"]),
    ("stall", &["for_ms", "target"]),
    ("crash", &["exit"]),
];

/// Largest `qp` / `target` ordinal (the port tracks at most this many QPs).
const MAX_QP_ORDINAL: i64 = 4096;
/// Largest `bit` (a 64 KiB packet).
const MAX_BIT: i64 = 65_536 * 8 - 1;

impl<'a> Parser<'a> {
    pub(super) fn rule(&self, table: &dyn TableLike, span: Span, index: usize) -> R<RuleSpec> {
        let what = format!("[[rule]] {index}");
        let allowed: Vec<&str> =
            OTHER_RULE_KEYS.iter().chain(MATCH_KEYS).chain(PARAM_KEYS).copied().collect();
        let f = self.fields(table, span.clone(), &what, &allowed)?;
        let line = ScenarioError::spanned("", self.text, span.clone(), String::new()).line;

        let Some(action_entry) = f.get("action") else {
            let names: Vec<&str> = ACTIONS.iter().map(|(n, _)| *n).collect();
            return Err(
                self.err(span, format!("missing `action` in {what} ({})", names.join(", ")))
            );
        };
        let action_name = self.string(action_entry)?;
        let Some(&(_, takes)) = ACTIONS.iter().find(|(n, _)| *n == action_name) else {
            let names: Vec<&str> = ACTIONS.iter().map(|(n, _)| *n).collect();
            return Err(self.err_at(action_entry, unknown("action", action_name, "", &names)));
        };
        for e in f.entries.iter().filter(|e| PARAM_KEYS.contains(&e.key)) {
            if !takes.contains(&e.key) {
                let takes = if takes.is_empty() { "none".to_owned() } else { takes.join(", ") };
                return Err(self.err_key(
                    e,
                    format!(
                        "action `{action_name}` takes no `{}` (its parameters: {takes})",
                        e.key
                    ),
                ));
            }
        }

        let name = match f.get("name") {
            Some(e) => {
                let s = self.string(e)?;
                let ok = !s.is_empty()
                    && s.len() <= 64
                    && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if !ok {
                    return Err(self.err_at(
                        e,
                        format!("rule name \"{s}\" must be 1 to 64 of [A-Za-z0-9-_.]"),
                    ));
                }
                s.to_owned()
            }
            None => format!("rule{index}"),
        };
        let scope = Scope {
            role: f.get("role").map(|e| self.name(e, "role", '-')).transpose()?.map(str::to_owned),
            device: f.get("device").map(|e| self.address(e)).transpose()?,
        };
        let dir = match f.get("dir") {
            Some(e) => self.choice(
                e,
                &[("in", DirMatch::In), ("out", DirMatch::Out), ("both", DirMatch::Both)],
            )?,
            None => DirMatch::Both,
        };
        let peer = f.get("peer").map(|e| self.address(e)).transpose()?;
        let mut matcher = Matcher::any();
        if let Some(e) = f.get("opcode") {
            let s = self.string(e)?;
            match opcode::known().find(|info| info.name == s) {
                Some(info) => matcher.opcode = Some(info.opcode),
                None => {
                    let names: Vec<&str> = opcode::known().map(|i| i.name).collect();
                    let hint = suggest(s, &names);
                    let hint = if hint.is_empty() {
                        " (names as in the opcode table: RC_SEND_ONLY, RC_ACKNOWLEDGE, ...)"
                            .to_owned()
                    } else {
                        hint
                    };
                    return Err(self.err_at(e, format!("unknown opcode \"{s}\"{hint}")));
                }
            }
        }
        let class = f.get("class").map(|e| self.choice(e, &Class::ALL)).transpose()?;
        matcher.opcode_mask = class.map(Class::mask);
        let position = match f.get("position") {
            Some(e) => Some(self.choice(
                e,
                &[
                    ("first", Position::First),
                    ("middle", Position::Middle),
                    ("last", Position::Last),
                    ("only", Position::Only),
                ],
            )?),
            None => None,
        };
        let qpn = f
            .get("qpn")
            .map(|e| self.int(e, 0, 0xff_ffff))
            .transpose()?
            .map(|v| Qpn::new(v as u32));
        let flow = FlowMatch {
            qp: f.get("qp").map(|e| self.int(e, 1, MAX_QP_ORDINAL)).transpose()?.map(|v| v as u32),
            psn_offset: f
                .get("psn_offset")
                .map(|e| self.int(e, 0, 0xff_ffff))
                .transpose()?
                .map(|v| v as u32),
            message: f
                .get("message")
                .map(|e| self.int(e, 1, u32::MAX.into()))
                .transpose()?
                .map(|v| v as u64),
            retransmit: f.get("retransmit").map(|e| self.boolean(e)).transpose()?,
        };

        let nth = f.get("nth").map(|e| self.int(e, 1, i64::MAX)).transpose()?;
        let times = match f.get("times") {
            None => None,
            Some(e) if nth.is_none() => {
                return Err(
                    self.err_key(e, "`times` needs `nth` (the first match that fires)".into())
                );
            }
            Some(e) if e.item.as_str() == Some("all") => None,
            Some(e) => Some(self.int(e, 1, i64::MAX)? as u64),
        };
        let fire = match nth {
            None => FireRange::EVERY,
            Some(n) => FireRange {
                nth: n as u64,
                times: if f.get("times").is_some() { times } else { Some(1) },
            },
        };
        let chance = match f.get("chance") {
            None => None,
            Some(e) => {
                let v = match (e.item.as_float(), e.item.as_integer()) {
                    (Some(v), _) => v,
                    (None, Some(v)) => v as f64,
                    _ => {
                        return Err(self.err_at(
                            e,
                            format!(
                                "`chance` must be a number in 0..=1, not {}",
                                e.item.type_name()
                            ),
                        ))
                    }
                };
                if !(0.0..=1.0).contains(&v) {
                    return Err(self.err_at(e, format!("`chance` = {v} is out of range 0..=1")));
                }
                Some(Probability::from_ppm((v * 1e6).round() as u32))
            }
        };
        let ms = |key: &str| -> R<Option<u64>> {
            f.get(key)
                .map(|e| self.int(e, 0, MAX_MS as i64).map(|v| v as u64 * 1_000_000))
                .transpose()
        };
        let window = Window { after_ns: ms("after_ms")?, until_ns: ms("until_ms")? };
        if let (Some(a), Some(u)) = (window.after_ns, window.until_ns) {
            if u <= a {
                let e = f.get("until_ms").expect("until_ms was read above");
                return Err(self.err_at(e, "`until_ms` must be after `after_ms`".into()));
            }
        }

        let action = self.action(&f, action_name, action_entry)?;
        let has_match = f.entries.iter().any(|e| MATCH_KEYS.contains(&e.key));
        let timed =
            window.after_ns.is_some() && !has_match && !matches!(action, ScenarioAction::Packet(_));
        if timed {
            if let Some(e) = ["nth", "times", "chance"].iter().find_map(|k| f.get(k)) {
                return Err(self.err_key(
                    e,
                    format!(
                        "a timed rule (a window and no match key) fires once at after_ms: `{}` does not apply",
                        e.key
                    ),
                ));
            }
            if matches!(action, ScenarioAction::Link(LinkAction::Partition { .. })) {
                return Err(self.err_at(
                    action_entry,
                    "a timed `partition` (no packet to take the peer from) needs `peer`".into(),
                ));
            }
        }
        let action = match action {
            ScenarioAction::Link(LinkAction::Partition { for_ns, .. }) => {
                ScenarioAction::Link(LinkAction::Partition { for_ns, peer })
            }
            other => other,
        };
        Ok(RuleSpec {
            name,
            scope,
            dir,
            peer,
            matcher,
            class,
            position,
            qpn,
            flow,
            fire,
            chance,
            window,
            action,
            timed,
            line,
        })
    }

    pub(super) fn action(&self, f: &Fields<'_>, name: &str, at: &Entry<'_>) -> R<ScenarioAction> {
        let int =
            |key: &str, min: i64, max: i64| f.get(key).map(|e| self.int(e, min, max)).transpose();
        let us =
            |key: &str, min: i64| int(key, min, MAX_US as i64).map(|v| v.map(|v| v as u64 * 1_000));
        let for_ms = || int("for_ms", 1, MAX_MS as i64).map(|v| v.map(|v| v as u64 * 1_000_000));
        let device = |kind: DeviceActionKind| -> R<ScenarioAction> {
            let target = match f.get("target") {
                None => Target::Matched,
                Some(e) => match e.item.as_str() {
                    Some("matched") => Target::Matched,
                    Some("all") => Target::All,
                    _ => Target::Qp(self.int(e, 1, MAX_QP_ORDINAL).map_err(|err| ScenarioError {
                        message: format!(
                            "{} (target: \"matched\", \"all\" or a QP ordinal)",
                            err.message
                        ),
                        ..err
                    })? as u32),
                },
            };
            let count = int("count", 1, 1_000_000)?.unwrap_or(1) as u32;
            let for_ns = if kind == DeviceActionKind::Stall {
                match for_ms()? {
                    Some(ns) => ns,
                    None => return Err(self.err_at(at, "action `stall` needs `for_ms`".into())),
                }
            } else {
                0
            };
            let exit = f.get("exit").map(|e| self.boolean(e)).transpose()?.unwrap_or(true);
            Ok(ScenarioAction::Device(DeviceActionSpec { kind, target, count, for_ns, exit }))
        };
        Ok(match name {
            "drop" => ScenarioAction::Packet(PacketAction::Drop),
            "duplicate" => ScenarioAction::Packet(PacketAction::Duplicate {
                copies: int("copies", 1, 16)?.unwrap_or(1) as u8,
                gap_ns: us("gap_us", 0)?.unwrap_or(0),
            }),
            "delay" => match us("delay_us", 1)? {
                Some(delay_ns) => ScenarioAction::Packet(PacketAction::Delay { delay_ns }),
                None => return Err(self.err_at(at, "action `delay` needs `delay_us`".into())),
            },
            "reorder" => ScenarioAction::Packet(PacketAction::Reorder {
                behind: int("behind", 1, 64)?.unwrap_or(1) as u8,
                max_hold_ns: us("max_hold_us", 1)?.unwrap_or(1_000_000),
            }),
            "corrupt" => ScenarioAction::Packet(PacketAction::Corrupt {
                bit: int("bit", 0, MAX_BIT)?.map(|b| b as usize),
            }),
            "link_down" => ScenarioAction::Link(LinkAction::Down { for_ns: for_ms()? }),
            "link_up" => ScenarioAction::Link(LinkAction::Up),
            "partition" => {
                ScenarioAction::Link(LinkAction::Partition { for_ns: for_ms()?, peer: None })
            }
            "rnr" => device(DeviceActionKind::Rnr)?,
            "fail_key" => device(DeviceActionKind::FailKey)?,
            "dma_fault" => device(DeviceActionKind::DmaFault)?,
            "stall" => device(DeviceActionKind::Stall)?,
            "crash" => device(DeviceActionKind::Crash)?,
            other => return Err(self.err_at(at, format!("unknown action \"{other}\""))),
        })
    }
}
