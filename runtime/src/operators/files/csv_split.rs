//! Where CSV records begin and end in a file, decided before any field is parsed, so that one
//! bad quote costs one line and never the rest of the file.
//!
//! RFC 4180 lets a quoted field hold line ends, so a record may span lines. A stray quote (a
//! field that opens with `"` and is never closed) would make every later line part of that one
//! field: the `csv` crate reads to the end of the file, and a reader that trusts it drops
//! thousands of good rows as one bad "record" — or, when the swallowed text happens to fit the
//! schema, as one row, silently. Here such a quote makes its own line a bad record and reading
//! resynchronises at the next line when the quoted field
//! - is not closed by the end of the file,
//! - runs past [`MAX_QUOTED_RECORD_BYTES`] (so memory stays bounded while looking for its end), or
//! - spans lines and is closed by a quote that text follows (`"oops` on one line, `x,"two` a few
//!   lines later): RFC 4180 wants a delimiter or a line end after a closing quote, and that quote
//!   was meant to open a field of its own.
//!
//! A quoted record that spans lines and then does not parse is also cut back to its first line
//! by the caller (`parse_rows`), which covers a stray quote closed by a later, unrelated one.
//!
//! The quoting rules are the `csv` crate's (which `arrow::csv` uses): a quote opens a quoted
//! field only at the start of a field, `""` inside one is a quote, a quote elsewhere is text;
//! `\n`, `\r` and `\r\n` end a record outside quotes; blank lines are no record.

/// The longest a quoted field may run, in bytes from its opening quote, before that quote counts
/// as stray. Far above a real multi-line field (an address, a comment), far
/// below what would let one quote hold a chunk of the file in memory.
pub(super) const MAX_QUOTED_RECORD_BYTES: usize = 1 << 20;

/// One piece of a CSV file, by byte offsets into the scanned data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CsvSpan {
    /// A record and its line end; `multiline`: a quoted field in it holds a line end.
    Record {
        start: usize,
        len: usize,
        multiline: bool,
    },
    /// The first line of a record whose quote is stray: a bad record of its own.
    StrayQuote {
        start: usize,
        len: usize,
        why: Stray,
    },
}

/// Why a quote counts as stray.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stray {
    /// Not closed by the end of the file.
    NeverClosed,
    /// Still open [`MAX_QUOTED_RECORD_BYTES`] after it opened.
    TooLong,
    /// Closed lines later by a quote that text follows.
    ClosedMidField,
}

impl std::fmt::Display for Stray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NeverClosed => f.write_str("a quoted field opened on this line is never closed"),
            Self::TooLong => write!(
                f,
                "a quoted field opened on this line runs past {MAX_QUOTED_RECORD_BYTES} bytes"
            ),
            Self::ClosedMidField => f.write_str(
                "a quoted field opened on this line is closed lines later by a quote that text \
                 follows",
            ),
        }
    }
}

impl CsvSpan {
    #[cfg(test)]
    pub(super) fn start(&self) -> usize {
        match self {
            Self::Record { start, .. } | Self::StrayQuote { start, .. } => *start,
        }
    }

    pub(super) fn end(&self) -> usize {
        match self {
            Self::Record { start, len, .. } | Self::StrayQuote { start, len, .. } => start + len,
        }
    }
}

/// The next span at or after `from` (blank lines skipped), or `None` when the data holds no
/// further decided span: it ends, or — unless `at_eof` — what is left may go on in bytes not
/// fetched yet (a record without its line end, a quoted field still open within the bound).
pub(super) fn next_span(data: &[u8], from: usize, delimiter: u8, at_eof: bool) -> Option<CsvSpan> {
    let mut start = from;
    loop {
        while start < data.len() && matches!(data[start], b'\n' | b'\r') {
            start += 1;
        }
        if start >= data.len() {
            return None;
        }
        let stray = |why| CsvSpan::StrayQuote {
            start,
            len: first_line_len(&data[start..]),
            why,
        };
        let span = match scan_record(&data[start..], delimiter) {
            Scan::Ends {
                multiline: true,
                text_after_quote: true,
                ..
            } => stray(Stray::ClosedMidField),
            Scan::Ends { len, multiline, .. } => CsvSpan::Record {
                start,
                len,
                multiline,
            },
            Scan::Open { too_long: false } if !at_eof => return None,
            Scan::Open { too_long: false } => stray(Stray::NeverClosed),
            Scan::Open { too_long: true } => stray(Stray::TooLong),
            Scan::NoLineEnd if at_eof => CsvSpan::Record {
                start,
                len: data.len() - start,
                multiline: false,
            },
            Scan::NoLineEnd => return None,
        };
        // a record of blanks only (spaces, tabs) is no record either, as a blank line
        if let CsvSpan::Record { len, .. } = span
            && data[start..start + len].iter().all(u8::is_ascii_whitespace)
        {
            start += len;
            continue;
        }
        return Some(span);
    }
}

/// Every span of `data`, and where the undecided rest starts (`data.len()` when none is left).
pub(super) fn spans(data: &[u8], delimiter: u8, at_eof: bool) -> (Vec<CsvSpan>, usize) {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(span) = next_span(data, from, delimiter, at_eof) {
        from = span.end();
        out.push(span);
    }
    // blank lines after the last span are decided too
    while from < data.len() && matches!(data[from], b'\n' | b'\r') {
        from += 1;
    }
    (out, from)
}

/// The length of the first line of `data`, its line end (`\n`, `\r` or `\r\n`) included.
pub(super) fn first_line_len(data: &[u8]) -> usize {
    match data.iter().position(|b| matches!(b, b'\n' | b'\r')) {
        Some(i) if data[i] == b'\r' && data.get(i + 1) == Some(&b'\n') => i + 2,
        Some(i) => i + 1,
        None => data.len(),
    }
}

enum Scan {
    /// The record ends `len` bytes in, its line end included; `multiline`: a quoted field holds
    /// a line end; `text_after_quote`: a closing quote is followed by text (which the `csv`
    /// crate appends to the field).
    Ends {
        len: usize,
        multiline: bool,
        text_after_quote: bool,
    },
    /// The data ends inside a quoted field, or the field ran past the bound.
    Open { too_long: bool },
    /// The data ends outside quotes before any line end.
    NoLineEnd,
}

#[derive(Clone, Copy)]
enum State {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: it closes the field, or starts `""`.
    QuoteInQuoted,
}

/// One record from the start of `data` (which is not a line end).
fn scan_record(data: &[u8], delimiter: u8) -> Scan {
    let mut state = State::FieldStart;
    let (mut multiline, mut text_after_quote) = (false, false);
    let mut opened_at = 0;
    for (i, &b) in data.iter().enumerate() {
        state = match state {
            State::Quoted if i - opened_at >= MAX_QUOTED_RECORD_BYTES => {
                return Scan::Open { too_long: true };
            }
            State::Quoted if b == b'"' => State::QuoteInQuoted,
            State::Quoted => {
                multiline |= matches!(b, b'\n' | b'\r');
                State::Quoted
            }
            State::QuoteInQuoted if b == b'"' => State::Quoted,
            State::FieldStart if b == b'"' => {
                opened_at = i;
                State::Quoted
            }
            _ if b == delimiter => State::FieldStart,
            _ if matches!(b, b'\n' | b'\r') => {
                let end = if b == b'\r' && data.get(i + 1) == Some(&b'\n') {
                    i + 2
                } else {
                    i + 1
                };
                return Scan::Ends {
                    len: end,
                    multiline,
                    text_after_quote,
                };
            }
            State::QuoteInQuoted => {
                text_after_quote = true;
                State::Unquoted
            }
            _ => State::Unquoted,
        };
    }
    match state {
        State::Quoted => Scan::Open { too_long: false },
        _ => Scan::NoLineEnd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(data: &str, at_eof: bool) -> (Vec<String>, usize) {
        let (spans, rest) = spans(data.as_bytes(), b',', at_eof);
        let texts = spans
            .iter()
            .map(|s| {
                let t = &data[s.start()..s.end()];
                match s {
                    CsvSpan::Record { .. } => t.to_string(),
                    CsvSpan::StrayQuote { .. } => format!("BAD {t}"),
                }
            })
            .collect();
        (texts, rest)
    }

    #[test]
    fn records_quoted_line_ends_and_blank_lines() {
        let data = "a,b\n\n1,\"x\ny\"\r\n  \n2,\"q\"\"\"\n3,c\"d\n4,e";
        assert_eq!(
            texts(data, true).0,
            [
                "a,b\n",
                "1,\"x\ny\"\r\n",
                "2,\"q\"\"\"\n",
                "3,c\"d\n",
                "4,e"
            ]
        );
        // without the end of the file, the last line may go on
        assert_eq!(texts(data, false).1, data.len() - 3);
    }

    #[test]
    fn a_quote_never_closed_is_a_bad_line_and_reading_goes_on() {
        let data = "1,a\n2,\"oops\n3,c\n4,d\n";
        assert_eq!(
            texts(data, true).0,
            ["1,a\n", "BAD 2,\"oops\n", "3,c\n", "4,d\n"]
        );
        // before the end of the file the quote may still close: undecided from its line on
        assert_eq!(texts(data, false), (vec!["1,a\n".to_string()], 4));
        // at the start and at the very end, without a line end
        assert_eq!(texts("\"x\n1,a", true).0, ["BAD \"x\n", "1,a"]);
        assert_eq!(texts("1,a\n2,\"b", true).0, ["1,a\n", "BAD 2,\"b"]);
    }

    #[test]
    fn a_quoted_field_past_the_bound_is_a_bad_line_even_if_it_closes_later() {
        let long = "y\n".repeat(MAX_QUOTED_RECORD_BYTES / 2 + 1);
        let data = format!("1,\"x\n{long}\"\n2,b\n");
        let (spans, rest) = spans(data.as_bytes(), b',', true);
        assert_eq!(rest, data.len());
        assert_eq!(
            spans[0],
            CsvSpan::StrayQuote {
                start: 0,
                len: 5,
                why: Stray::TooLong
            }
        );
        // the lines after it are records again; the quote meant to close it now opens a field
        // that is never closed: a bad line of its own too
        assert_eq!(spans.len(), 1 + (MAX_QUOTED_RECORD_BYTES / 2 + 1) + 2);
        assert!(matches!(
            spans[spans.len() - 2],
            CsvSpan::StrayQuote {
                len: 2,
                why: Stray::NeverClosed,
                ..
            }
        ));
        assert_eq!(&data[spans[spans.len() - 1].start()..], "2,b\n");
    }

    #[test]
    fn a_stray_quote_closed_by_a_later_field_costs_its_line_only() {
        // the quote on line 2 is closed by the one meant to open a field on line 4
        let data = "1,a\n2,\"oops\n3,c\n4,\"two\nlines\"\n5,\"x\"y\n";
        assert_eq!(
            texts(data, true).0,
            [
                "1,a\n",
                "BAD 2,\"oops\n",
                "3,c\n",
                "4,\"two\nlines\"\n",
                // on one line, text after a closing quote stays the csv crate's business
                "5,\"x\"y\n"
            ]
        );
    }

    #[test]
    fn first_line_includes_its_line_end() {
        assert_eq!(first_line_len(b"ab\r\ncd"), 4);
        assert_eq!(first_line_len(b"ab\rcd"), 3);
        assert_eq!(first_line_len(b"ab"), 2);
    }
}
