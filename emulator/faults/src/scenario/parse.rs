//! The scenario file's parser: `toml_edit` for the syntax, then a walk of
//! the document that checks every key against the schema (§2.2 of the
//! design note) and keeps each item's span for the error messages.

use super::expect::{Expect, ExpectExit, Outcome, RoleExpect, ASYNC_EVENTS, WC_STATUSES};
use super::{
    Class, DeviceActionKind, DeviceActionSpec, DirMatch, FireRange, FlowMatch, LinkAction,
    PacketAction, Position, RuleSpec, Scenario, ScenarioAction, ScenarioError, Scope, Target,
    Window, MAX_MS, MAX_US,
};
use crate::rng::Probability;
use crate::rule::Matcher;
use crate::spec::FaultSpec;
use core::net::IpAddr;
use core::ops::Range;
use toml_edit::{Document, Item, TableLike};
use uroce_wire::{opcode, Qpn};

type Span = Option<Range<usize>>;
type R<T> = Result<T, ScenarioError>;

const ROOT_KEYS: &[&str] = &["scenario", "params", "expect", "rule"];
const SCENARIO_KEYS: &[&str] = &["name", "summary", "seed", "faults"];
const EXPECT_KEYS: &[&str] = &[
    "outcome",
    "status",
    "within_ms",
    "min_counters",
    "max_counters",
    "async_event",
    "exit",
    "observe",
];
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

pub(super) fn parse(text: &str, origin: &str, overrides: &[(String, i64)]) -> R<Scenario> {
    let doc = Document::parse(text).map_err(|e| {
        let message = e.message().lines().next().unwrap_or("syntax error").to_owned();
        ScenarioError::spanned(origin, text, e.span(), format!("syntax error: {message}"))
    })?;
    let mut p = Parser { text, origin, params: Vec::new() };
    let root = p.fields(doc.as_table(), None, "the file", ROOT_KEYS)?;

    if let Some(e) = root.get("params") {
        p.params(e, overrides)?;
    } else if let Some((name, _)) = overrides.first() {
        return Err(ScenarioError::outside(
            "--param",
            format!("unknown param \"{name}\": the scenario declares no [params]"),
        ));
    }
    let Some(head) = root.get("scenario") else {
        return Err(p.err(Some(0..0), "missing [scenario] table (name, summary)".into()));
    };
    let head_table = p.table(head, "[scenario]")?;
    let head = p.fields(head_table, head.item.span(), "[scenario]", SCENARIO_KEYS)?;
    let name = match head.get("name") {
        Some(e) => p.name(e, "scenario name", '-')?.to_owned(),
        None => return Err(p.err(head.span.clone(), "missing `name` in [scenario]".into())),
    };
    let summary = match head.get("summary") {
        Some(e) => p.string(e)?.to_owned(),
        None => return Err(p.err(head.span.clone(), "missing `summary` in [scenario]".into())),
    };
    let seed = head.get("seed").map(|e| p.int(e, 0, i64::MAX)).transpose()?.unwrap_or(0) as u64;
    let background = match head.get("faults") {
        Some(e) => Some(FaultSpec::parse(p.string(e)?).map_err(|err| p.err_at(e, err.0))?),
        None => None,
    };
    let expect = match root.get("expect") {
        Some(e) => p.expect(e)?,
        None => Expect::default(),
    };
    let mut rules: Vec<RuleSpec> = Vec::new();
    if let Some(e) = root.get("rule") {
        let Some(array) = e.item.as_array_of_tables() else {
            return Err(p.err_at(e, "`rule` must be [[rule]] tables".into()));
        };
        for (i, table) in array.iter().enumerate() {
            let rule = p.rule(table, table.span(), i + 1)?;
            if let Some(other) = rules.iter().find(|r| r.name == rule.name) {
                return Err(p.err(
                    table.span(),
                    format!("two rules named \"{}\" (the other at line {})", rule.name, other.line),
                ));
            }
            rules.push(rule);
        }
    }
    Ok(Scenario {
        name,
        summary,
        seed,
        background,
        params: p.params,
        expect,
        rules,
        origin: origin.to_owned(),
        text: text.to_owned(),
    })
}

struct Parser<'a> {
    text: &'a str,
    origin: &'a str,
    params: Vec<(String, i64)>,
}

/// A key of a table, where it is, and its item.
struct Entry<'t> {
    key: &'t str,
    key_span: Span,
    item: &'t Item,
}

/// A table's keys, checked against the schema.
struct Fields<'t> {
    span: Span,
    entries: Vec<Entry<'t>>,
}

impl<'t> Fields<'t> {
    fn get(&self, key: &str) -> Option<&Entry<'t>> {
        self.entries.iter().find(|e| e.key == key)
    }
}

impl<'a> Parser<'a> {
    fn err(&self, span: Span, message: String) -> ScenarioError {
        ScenarioError::spanned(self.origin, self.text, span, message)
    }

    /// An error at an entry's value (or its key when the value has no span).
    fn err_at(&self, e: &Entry<'_>, message: String) -> ScenarioError {
        self.err(e.item.span().or(e.key_span.clone()), message)
    }

    /// An error at an entry's key.
    fn err_key(&self, e: &Entry<'_>, message: String) -> ScenarioError {
        self.err(e.key_span.clone().or(e.item.span()), message)
    }

    fn fields<'t>(
        &self,
        table: &'t dyn TableLike,
        span: Span,
        what: &str,
        allowed: &[&str],
    ) -> R<Fields<'t>> {
        let mut entries = Vec::new();
        for (key, item) in table.iter() {
            let key_span = table.key(key).and_then(|k| k.span());
            let entry = Entry { key, key_span, item };
            if !allowed.contains(&key) {
                return Err(self.err_key(&entry, unknown("key", key, what, allowed)));
            }
            entries.push(entry);
        }
        Ok(Fields { span, entries })
    }

    fn table<'t>(&self, e: &Entry<'t>, what: &str) -> R<&'t dyn TableLike> {
        e.item.as_table_like().ok_or_else(|| {
            self.err_at(e, format!("{what} must be a table, not {}", e.item.type_name()))
        })
    }

    fn string<'t>(&self, e: &Entry<'t>) -> R<&'t str> {
        e.item.as_str().ok_or_else(|| {
            self.err_at(e, format!("`{}` must be a string, not {}", e.key, e.item.type_name()))
        })
    }

    fn boolean(&self, e: &Entry<'_>) -> R<bool> {
        e.item.as_bool().ok_or_else(|| {
            self.err_at(e, format!("`{}` must be true or false, not {}", e.key, e.item.type_name()))
        })
    }

    /// An integer in `min..=max`, or the name of a param holding one.
    fn int(&self, e: &Entry<'_>, min: i64, max: i64) -> R<i64> {
        let value = if let Some(v) = e.item.as_integer() {
            v
        } else if let Some(name) = e.item.as_str() {
            self.param(e, name)?
        } else {
            return Err(self.err_at(
                e,
                format!(
                    "`{}` must be an integer (or a param's name), not {}",
                    e.key,
                    e.item.type_name()
                ),
            ));
        };
        if !(min..=max).contains(&value) {
            return Err(
                self.err_at(e, format!("`{}` = {value} is out of range {min}..={max}", e.key))
            );
        }
        Ok(value)
    }

    fn param(&self, e: &Entry<'_>, name: &str) -> R<i64> {
        match self.params.iter().find(|(n, _)| n == name) {
            Some(&(_, v)) => Ok(v),
            None if self.params.is_empty() => Err(self.err_at(
                e,
                format!("`{}` = \"{name}\" names no param: the file has no [params]", e.key),
            )),
            None => {
                let names: Vec<&str> = self.params.iter().map(|(n, _)| n.as_str()).collect();
                Err(self.err_at(
                    e,
                    format!("`{}` = \"{name}\" names no param{}", e.key, suggest(name, &names)),
                ))
            }
        }
    }

    /// A name of `[a-z0-9]` and `sep`, 1 to 64 characters.
    fn name<'t>(&self, e: &Entry<'t>, what: &str, sep: char) -> R<&'t str> {
        let s = self.string(e)?;
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == sep);
        if !ok {
            return Err(self.err_at(e, format!("{what} \"{s}\" must be 1 to 64 of [a-z0-9{sep}]")));
        }
        Ok(s)
    }

    fn address(&self, e: &Entry<'_>) -> R<IpAddr> {
        let s = self.string(e)?;
        s.parse().map_err(|_| self.err_at(e, format!("`{}` = \"{s}\" is not an IP address", e.key)))
    }

    /// One of `choices`, by name.
    fn choice<T: Copy>(&self, e: &Entry<'_>, choices: &[(&str, T)]) -> R<T> {
        let s = self.string(e)?;
        match choices.iter().find(|(n, _)| *n == s) {
            Some(&(_, v)) => Ok(v),
            None => {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                Err(self.err_at(e, unknown(e.key, s, "", &names)))
            }
        }
    }

    fn params(&mut self, e: &Entry<'_>, overrides: &[(String, i64)]) -> R<()> {
        let table = self.table(e, "[params]")?;
        for (key, item) in table.iter() {
            let key_span = table.key(key).and_then(|k| k.span());
            let entry = Entry { key, key_span, item };
            let ok = key.len() <= 64
                && key.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                && key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !ok || matches!(key, "all" | "matched") {
                return Err(self.err_key(
                    &entry,
                    format!("param name \"{key}\" must be [a-z_][a-z0-9_]* and not all/matched"),
                ));
            }
            let Some(value) = item.as_integer() else {
                return Err(self.err_at(
                    &entry,
                    format!("param `{key}` must be an integer, not {}", item.type_name()),
                ));
            };
            self.params.push((key.to_owned(), value));
        }
        for (name, value) in overrides {
            match self.params.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = *value,
                None => {
                    let names: Vec<&str> = self.params.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(ScenarioError::outside(
                        "--param",
                        format!("unknown param \"{name}\"{}", suggest(name, &names)),
                    ));
                }
            }
        }
        Ok(())
    }

    fn expect(&self, e: &Entry<'_>) -> R<Expect> {
        let table = self.table(e, "[expect]")?;
        let mut expect = Expect::default();
        let mut common = Vec::new();
        for (key, item) in table.iter() {
            let key_span = table.key(key).and_then(|k| k.span());
            let entry = Entry { key, key_span, item };
            if EXPECT_KEYS.contains(&key) {
                common.push(entry);
            } else if let Some(role_table) = item.as_table_like() {
                let ok = !key.is_empty()
                    && key.len() <= 64
                    && key
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if !ok {
                    return Err(self
                        .err_key(&entry, format!("role \"{key}\" must be 1 to 64 of [a-z0-9-]")));
                }
                let what = format!("[expect.{key}]");
                let fields = self.fields(role_table, item.span(), &what, EXPECT_KEYS)?;
                expect.roles.push((key.to_owned(), self.role_expect(&fields)?));
            } else {
                return Err(self.err_key(
                    &entry,
                    unknown("key", key, "[expect] (or a [expect.<role>] table)", EXPECT_KEYS),
                ));
            }
        }
        expect.common = self.role_expect(&Fields { span: e.item.span(), entries: common })?;
        Ok(expect)
    }

    fn role_expect(&self, f: &Fields<'_>) -> R<RoleExpect> {
        let mut x = RoleExpect::default();
        if let Some(e) = f.get("outcome") {
            x.outcome =
                Some(self.choice(e, &[("success", Outcome::Success), ("error", Outcome::Error)])?);
        }
        if let Some(e) = f.get("status") {
            let s = self.string(e)?;
            if !WC_STATUSES.contains(&s) {
                return Err(self.err_at(e, unknown("status", s, "", &WC_STATUSES)));
            }
            if x.outcome == Some(Outcome::Success) {
                return Err(
                    self.err_at(e, "`status` names an error: it needs outcome = \"error\"".into())
                );
            }
            x.status = Some(s.to_owned());
        }
        if x.outcome == Some(Outcome::Error) && x.status.is_none() {
            let e = f.get("outcome").expect("outcome was read above");
            return Err(
                self.err_at(e, "outcome = \"error\" needs `status` (an IBV_WC_* name)".into())
            );
        }
        if let Some(e) = f.get("within_ms") {
            x.within_ms = Some(self.int(e, 1, MAX_MS as i64)? as u64);
        }
        for (key, out) in
            [("min_counters", &mut x.min_counters), ("max_counters", &mut x.max_counters)]
        {
            if let Some(e) = f.get(key) {
                let table = self.table(e, &format!("`{key}`"))?;
                for (name, item) in table.iter() {
                    let key_span = table.key(name).and_then(|k| k.span());
                    let entry = Entry { key: name, key_span, item };
                    let ok = !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                    if !ok {
                        return Err(self.err_key(
                            &entry,
                            format!("counter name \"{name}\" must be [a-z0-9_]+"),
                        ));
                    }
                    out.push((name.to_owned(), self.int(&entry, 0, i64::MAX)? as u64));
                }
            }
        }
        if let Some(e) = f.get("async_event") {
            let s = self.string(e)?;
            if !ASYNC_EVENTS.contains(&s) {
                return Err(self.err_at(e, unknown("async_event", s, "", &ASYNC_EVENTS)));
            }
            x.async_event = Some(s.to_owned());
        }
        if let Some(e) = f.get("exit") {
            x.exit = Some(self.choice(e, &[("killed", ExpectExit::Killed)])?);
        }
        if let Some(e) = f.get("observe") {
            x.observe = Some(self.string(e)?.to_owned());
        }
        Ok(x)
    }

    fn rule(&self, table: &dyn TableLike, span: Span, index: usize) -> R<RuleSpec> {
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

    fn action(&self, f: &Fields<'_>, name: &str, at: &Entry<'_>) -> R<ScenarioAction> {
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

/// `unknown <what> "<got>" in <place> (did you mean "x"?) (valid: a, b, c)`.
fn unknown(what: &str, got: &str, place: &str, valid: &[&str]) -> String {
    let place = if place.is_empty() { String::new() } else { format!(" in {place}") };
    format!("unknown {what} \"{got}\"{place}{} (valid: {})", suggest(got, valid), valid.join(", "))
}

/// ` (did you mean "x"?)` for the closest name within two edits, or "".
fn suggest(got: &str, valid: &[&str]) -> String {
    let best = valid
        .iter()
        .map(|v| (edit_distance(got, v), *v))
        .filter(|&(d, v)| d <= 2 && d < v.len())
        .min_by_key(|&(d, _)| d);
    best.map_or(String::new(), |(_, v)| format!(" (did you mean \"{v}\"?)"))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().take(64).collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
