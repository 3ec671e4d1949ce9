//! The scenario file's parser: `toml_edit` for the syntax, then a walk of
//! the document that checks every key against the schema (§2.2 of the
//! design note) and keeps each item's span for the error messages.

mod rule;
mod sections;
mod values;

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
use values::{suggest, unknown};

type Span = Option<Range<usize>>;
type R<T> = Result<T, ScenarioError>;

const ROOT_KEYS: &[&str] = &["scenario", "params", "expect", "rule"];
const SCENARIO_KEYS: &[&str] = &["name", "summary", "seed", "faults"];

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
