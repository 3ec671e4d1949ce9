//! [`ScenarioError`]: where a scenario file is wrong, with the line and a
//! caret.

use core::fmt;
use core::ops::Range;

/// A scenario that does not parse or does not validate: which file, which
/// line and column (both 1-based; 0 when the error is not in the file, e.g.
/// an unknown `--param`), what is wrong, and the offending line.
///
/// `Display` prints `scenario <origin>:<line>:<column>: <message>`, then the
/// line and a caret under the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// Where the text came from: a file name, `library:<name>`, `--param`.
    pub origin: String,
    /// 1-based line, 0 when not in the file.
    pub line: u32,
    /// 1-based column in characters, 0 when not in the file.
    pub column: u32,
    /// What is wrong.
    pub message: String,
    /// The text of the offending line (empty when not in the file).
    pub source_line: String,
}

impl ScenarioError {
    /// An error at byte `offset` of `text` (clamped to the text).
    pub(crate) fn at(origin: &str, text: &str, offset: usize, message: String) -> ScenarioError {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line = text[..line_start].bytes().filter(|&b| b == b'\n').count() + 1;
        let column = text[line_start..offset].chars().count() + 1;
        let source_line = text[line_start..line_end].trim_end_matches('\r').to_owned();
        ScenarioError {
            origin: origin.to_owned(),
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
            message,
            source_line,
        }
    }

    /// An error that is not in the file.
    pub(crate) fn outside(origin: &str, message: String) -> ScenarioError {
        ScenarioError {
            origin: origin.to_owned(),
            line: 0,
            column: 0,
            message,
            source_line: String::new(),
        }
    }

    /// An error at the start of `span` (or of the text when `None`).
    pub(crate) fn spanned(
        origin: &str,
        text: &str,
        span: Option<Range<usize>>,
        message: String,
    ) -> ScenarioError {
        ScenarioError::at(origin, text, span.map_or(0, |s| s.start), message)
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "scenario {}: {}", self.origin, self.message);
        }
        writeln!(f, "scenario {}:{}:{}: {}", self.origin, self.line, self.column, self.message)?;
        let gutter = self.line.to_string();
        writeln!(f, "{gutter} | {}", self.source_line)?;
        let pad = " ".repeat(gutter.len());
        let lead: String = self
            .source_line
            .chars()
            .take(self.column.saturating_sub(1) as usize)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{pad} | {lead}^")
    }
}

impl std::error::Error for ScenarioError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_and_caret() {
        let text = "a = 1\n\tbé = 2\n";
        let e = ScenarioError::at("f.toml", text, text.find('=').unwrap(), "x".into());
        assert_eq!((e.line, e.column), (1, 3));
        let e = ScenarioError::at("f.toml", text, text.rfind('=').unwrap(), "bad".into());
        assert_eq!((e.line, e.column), (2, 5));
        assert_eq!(e.to_string(), "scenario f.toml:2:5: bad\n2 | \tbé = 2\n  | \t   ^");
        let end = ScenarioError::at("f.toml", text, 999, "eof".into());
        assert_eq!((end.line, end.column), (3, 1));
        let mid_char = ScenarioError::at("f", "é", 1, "m".into());
        assert_eq!((mid_char.line, mid_char.column), (1, 1));
        let outside = ScenarioError::outside("--param", "unknown".into());
        assert_eq!(outside.to_string(), "scenario --param: unknown");
    }
}
