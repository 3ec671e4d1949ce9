//! The `[params]` and `[expect]` sections.

use super::*;

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

impl<'a> Parser<'a> {
    pub(super) fn params(&mut self, e: &Entry<'_>, overrides: &[(String, i64)]) -> R<()> {
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

    pub(super) fn expect(&self, e: &Entry<'_>) -> R<Expect> {
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

    pub(super) fn role_expect(&self, f: &Fields<'_>) -> R<RoleExpect> {
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
}
