//! The [`Parser`](super::Parser)'s errors and scalar readers (strings, integers, params, names,
//! addresses, choices), and the did-you-mean for unknown names.

use super::*;

impl<'a> Parser<'a> {
    pub(super) fn err(&self, span: Span, message: String) -> ScenarioError {
        ScenarioError::spanned(self.origin, self.text, span, message)
    }

    /// An error at an entry's value (or its key when the value has no span).
    pub(super) fn err_at(&self, e: &Entry<'_>, message: String) -> ScenarioError {
        self.err(e.item.span().or(e.key_span.clone()), message)
    }

    /// An error at an entry's key.
    pub(super) fn err_key(&self, e: &Entry<'_>, message: String) -> ScenarioError {
        self.err(e.key_span.clone().or(e.item.span()), message)
    }

    pub(super) fn fields<'t>(
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

    pub(super) fn table<'t>(&self, e: &Entry<'t>, what: &str) -> R<&'t dyn TableLike> {
        e.item.as_table_like().ok_or_else(|| {
            self.err_at(e, format!("{what} must be a table, not {}", e.item.type_name()))
        })
    }

    pub(super) fn string<'t>(&self, e: &Entry<'t>) -> R<&'t str> {
        e.item.as_str().ok_or_else(|| {
            self.err_at(e, format!("`{}` must be a string, not {}", e.key, e.item.type_name()))
        })
    }

    pub(super) fn boolean(&self, e: &Entry<'_>) -> R<bool> {
        e.item.as_bool().ok_or_else(|| {
            self.err_at(e, format!("`{}` must be true or false, not {}", e.key, e.item.type_name()))
        })
    }

    /// An integer in `min..=max`, or the name of a param holding one.
    pub(super) fn int(&self, e: &Entry<'_>, min: i64, max: i64) -> R<i64> {
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

    pub(super) fn param(&self, e: &Entry<'_>, name: &str) -> R<i64> {
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
    pub(super) fn name<'t>(&self, e: &Entry<'t>, what: &str, sep: char) -> R<&'t str> {
        let s = self.string(e)?;
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == sep);
        if !ok {
            return Err(self.err_at(e, format!("{what} \"{s}\" must be 1 to 64 of [a-z0-9{sep}]")));
        }
        Ok(s)
    }

    pub(super) fn address(&self, e: &Entry<'_>) -> R<IpAddr> {
        let s = self.string(e)?;
        s.parse().map_err(|_| self.err_at(e, format!("`{}` = \"{s}\" is not an IP address", e.key)))
    }

    /// One of `choices`, by name.
    pub(super) fn choice<T: Copy>(&self, e: &Entry<'_>, choices: &[(&str, T)]) -> R<T> {
        let s = self.string(e)?;
        match choices.iter().find(|(n, _)| *n == s) {
            Some(&(_, v)) => Ok(v),
            None => {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                Err(self.err_at(e, unknown(e.key, s, "", &names)))
            }
        }
    }
}

/// `unknown <what> "<got>" in <place> (did you mean "x"?) (valid: a, b, c)`.
pub(super) fn unknown(what: &str, got: &str, place: &str, valid: &[&str]) -> String {
    let place = if place.is_empty() { String::new() } else { format!(" in {place}") };
    format!("unknown {what} \"{got}\"{place}{} (valid: {})", suggest(got, valid), valid.join(", "))
}

/// ` (did you mean "x"?)` for the closest name within two edits, or "".
pub(super) fn suggest(got: &str, valid: &[&str]) -> String {
    let best = valid
        .iter()
        .map(|v| (edit_distance(got, v), *v))
        .filter(|&(d, v)| d <= 2 && d < v.len())
        .min_by_key(|&(d, _)| d);
    best.map_or(String::new(), |(_, v)| format!(" (did you mean \"{v}\"?)"))
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
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
