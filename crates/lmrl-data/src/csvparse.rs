//! A strict RFC 4180 CSV splitter that never lets one bad quote swallow the lines after it.
//!
//! The `csv` crate is lenient by design: text after a closing quote is silently appended, so a
//! row with a stray quote swallows the next line and still "parses". Review files exported from
//! pandas are well-formed, so here such a row is an error naming the line where its record
//! starts.
//!
//! Rules: fields are separated by `,`, records by `\n` or `\r\n`; a field that starts with `"`
//! is quoted, `""` inside it is a literal quote, and after its closing quote only `,`, a line
//! end or the end of the file may follow. A `"` inside an unquoted field is taken literally
//! (unambiguous, and common in hand-written files). Empty lines are skipped.
//!
//! Resynchronisation. A quoted field may hold line breaks, so a `"` that opens an unquoted field
//! by mistake runs on to the next `"` anywhere in the file. Nothing in the bytes tells such a
//! run-on from a real multi-line field, but a run-on almost never closes cleanly: its "closing"
//! quote is usually the opening quote of a later field, followed by text. So a record is
//! reported malformed at its first line and reading resumes at the line after its first line
//! (never after the line where the problem was noticed) whenever it has a quote that is never
//! closed or is followed by something other than `,` / a line end. A record that spans lines
//! and parses can still be rejected by the reader (wrong number of fields, a bad value): the
//! reader calls [`Parser::reject`], which rewinds to the line after the record's first line in
//! the same way. Valid multi-line fields are kept; a bad quote costs its own line, and every
//! line after it is read again as rows of its own.
//!
//! The one case this cannot catch is a run-on whose closing quote happens to be followed by a
//! separator and which then forms a row the reader accepts: RFC 4180 cannot tell that from a
//! real multi-line field.

/// One record: the 1-based lines it starts and ends on and its raw fields (bytes; UTF-8 is
/// checked by the caller so that it can name the field).
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub line: u64,
    pub last_line: u64,
    pub fields: Vec<Vec<u8>>,
}

impl RawRecord {
    /// Whether a quoted field of this record holds a line break.
    pub fn spans_lines(&self) -> bool {
        self.last_line > self.line
    }
}

/// A record or a malformed one (with the line it starts on).
#[derive(Debug)]
pub(crate) enum RawItem {
    Record(RawRecord),
    Malformed { line: u64, message: String },
}

/// Splits bytes into records, one per call of [`Iterator::next`].
pub(crate) struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u64,
    /// Number of fields a record should have, when the caller knows it. A record that spans
    /// lines is cut short as soon as it has more, so a run-on quote costs time proportional to
    /// the row width and not to the rest of the file.
    width: Option<usize>,
    /// Where [`Parser::reject`] resumes: the line after the first line of the record just
    /// returned, when that record spans lines.
    retry: Option<(usize, u64)>,
}

impl<'a> Parser<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            line: 1,
            width: None,
            retry: None,
        }
    }

    /// Records should have `width` fields from now on (set once the header is read).
    pub fn set_width(&mut self, width: usize) {
        self.width = Some(width);
    }

    /// The caller found the record just returned unusable. If it spans lines, its first quote
    /// may have been a stray one that ran over the lines after it, so reading resumes at the
    /// line after the record's first line. Returns whether it rewound.
    pub fn reject(&mut self) -> bool {
        match self.retry.take() {
            Some((pos, line)) => {
                self.pos = pos;
                self.line = line;
                true
            }
            None => false,
        }
    }

    /// Start of the line after the one that `start` is on, and that line's number.
    fn next_line_after(&self, start: usize, start_line: u64) -> (usize, u64) {
        match self.bytes[start..].iter().position(|&b| b == b'\n') {
            Some(off) => (start + off + 1, start_line + 1),
            None => (self.bytes.len(), start_line + 1),
        }
    }

    fn is_line_end(&self, i: usize) -> bool {
        let b = self.bytes;
        b[i] == b'\n' || (b[i] == b'\r' && b.get(i + 1) == Some(&b'\n'))
    }

    /// Parse one record starting at `self.pos` (not on an empty line).
    fn record(&mut self) -> Result<RawRecord, String> {
        let bytes = self.bytes;
        let n = bytes.len();
        let start_line = self.line;
        let mut i = self.pos;
        let mut line = self.line;
        let mut fields = Vec::new();
        loop {
            let mut field = Vec::new();
            if i < n && bytes[i] == b'"' {
                let open_line = line;
                i += 1;
                let mut closed = false;
                while i < n {
                    match bytes[i] {
                        b'"' if bytes.get(i + 1) == Some(&b'"') => {
                            field.push(b'"');
                            i += 2;
                        }
                        b'"' => {
                            closed = true;
                            i += 1;
                            break;
                        }
                        b => {
                            if b == b'\n' {
                                line += 1;
                            }
                            field.push(b);
                            i += 1;
                        }
                    }
                }
                if !closed {
                    return Err(format!(
                        "quoted field opened on line {open_line} is never closed (runs to the end of the file; a stray double quote?)"
                    ));
                }
                if i < n && bytes[i] != b',' && !self.is_line_end(i) {
                    let ch = String::from_utf8_lossy(&bytes[i..(i + 4).min(n)]).into_owned();
                    return Err(if line > open_line {
                        format!(
                            "quoted field opened on line {open_line} runs on to line {line}, where its closing quote is followed by {ch:?} (a stray double quote? quotes inside a quoted field must be doubled)"
                        )
                    } else {
                        format!(
                            "text {ch:?} after a closing quote on line {line} (unbalanced or unescaped double quote; quotes inside a quoted field must be doubled)"
                        )
                    });
                }
            } else {
                while i < n && bytes[i] != b',' && !self.is_line_end(i) {
                    field.push(bytes[i]);
                    i += 1;
                }
            }
            fields.push(field);
            if let Some(w) = self.width
                && line > start_line
                && fields.len() > w
            {
                return Err(format!(
                    "more than {w} fields in a row whose quoted field runs from line {start_line} to line {line} (a stray double quote?)"
                ));
            }
            if i < n && bytes[i] == b',' {
                i += 1;
                continue;
            }
            // Line end or end of file.
            let last_line = line;
            if i < n && bytes[i] == b'\r' {
                i += 1;
            }
            if i < n && bytes[i] == b'\n' {
                i += 1;
                line += 1;
            }
            self.pos = i;
            self.line = line;
            return Ok(RawRecord {
                line: start_line,
                last_line,
                fields,
            });
        }
    }
}

impl Iterator for Parser<'_> {
    type Item = RawItem;

    fn next(&mut self) -> Option<RawItem> {
        self.retry = None;
        let bytes = self.bytes;
        // Skip empty lines between records.
        loop {
            if self.pos >= bytes.len() {
                return None;
            }
            if bytes[self.pos] == b'\n' {
                self.pos += 1;
            } else if bytes[self.pos] == b'\r' && bytes.get(self.pos + 1) == Some(&b'\n') {
                self.pos += 2;
            } else {
                break;
            }
            self.line += 1;
        }
        let (start, start_line) = (self.pos, self.line);
        let resume = self.next_line_after(start, start_line);
        match self.record() {
            Ok(rec) => {
                if rec.spans_lines() {
                    self.retry = Some(resume);
                }
                Some(RawItem::Record(rec))
            }
            Err(message) => {
                (self.pos, self.line) = resume;
                Some(RawItem::Malformed {
                    line: start_line,
                    message,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Item = Result<(u64, Vec<String>), u64>;

    fn items(mut p: Parser<'_>, reject: impl Fn(&RawRecord) -> bool) -> Vec<Item> {
        let mut out = Vec::new();
        while let Some(it) = p.next() {
            out.push(match it {
                RawItem::Record(r) => {
                    if reject(&r) {
                        assert!(p.reject());
                        Err(r.line)
                    } else {
                        Ok((
                            r.line,
                            r.fields
                                .iter()
                                .map(|f| String::from_utf8_lossy(f).into_owned())
                                .collect(),
                        ))
                    }
                }
                RawItem::Malformed { line, .. } => Err(line),
            });
        }
        out
    }

    fn records(s: &[u8]) -> Vec<Item> {
        items(Parser::new(s), |_| false)
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn well_formed() {
        let got = records(b"a,b\r\n\"x, \"\"y\"\"\",1\n\n\"multi\nline\",2\nlast,\n");
        let want: Vec<Item> = vec![
            Ok((1, strs(&["a", "b"]))),
            Ok((2, strs(&["x, \"y\"", "1"]))),
            Ok((4, strs(&["multi\nline", "2"]))),
            Ok((6, strs(&["last", ""]))),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn no_final_newline_and_literal_quote_in_unquoted_field() {
        let got = records(b"he said \"hi\",1");
        assert_eq!(got, vec![Ok((1, strs(&["he said \"hi\"", "1"])))]);
    }

    #[test]
    fn text_after_closing_quote_resyncs_next_line() {
        let got = records(b"\"ok\",1\n\"bad\"x,1\n\"fine\",0\n");
        assert_eq!(got[1], Err(2));
        assert_eq!(got[2], Ok((3, strs(&["fine", "0"]))));
    }

    #[test]
    fn unterminated_quote_costs_only_its_line() {
        let got = records(b"\"ok\",1\n\"open,1\nmore,0\n");
        assert_eq!(
            got,
            vec![
                Ok((1, strs(&["ok", "1"]))),
                Err(2),
                Ok((3, strs(&["more", "0"])))
            ]
        );
    }

    #[test]
    fn run_on_to_a_later_field_resumes_after_the_first_line() {
        // Line 2's quote runs on to the opening quote of line 4, which is followed by text.
        let got = records(b"a,1\n\"stray,0\nb,1\n\"quoted\",0\nc,1\n");
        assert_eq!(
            got,
            vec![
                Ok((1, strs(&["a", "1"]))),
                Err(2),
                Ok((3, strs(&["b", "1"]))),
                Ok((4, strs(&["quoted", "0"]))),
                Ok((5, strs(&["c", "1"]))),
            ]
        );
    }

    #[test]
    fn rejected_multi_line_record_is_read_again_from_its_second_line() {
        // `"stray,1\nhello",0` is a well-formed two-field record; a reader that rejects it
        // (say, because the label is not valid) gets line 2 back as a row of its own.
        let body = b"\"stray,1\nhello\",0\nnext,1\n";
        let got = items(Parser::new(body), |r| r.spans_lines());
        assert_eq!(
            got,
            vec![
                Err(1),
                Ok((2, strs(&["hello\"", "0"]))),
                Ok((3, strs(&["next", "1"])))
            ]
        );
        // Rejecting a one-line record does not rewind.
        let mut p = Parser::new(b"x,1\ny,0\n");
        assert!(matches!(p.next(), Some(RawItem::Record(_))));
        assert!(!p.reject());
        assert!(matches!(p.next(), Some(RawItem::Record(r)) if r.line == 2));
    }

    #[test]
    fn width_cuts_a_run_on_record_short() {
        let mut p = Parser::new(b"\"a\nb\",1,2\n");
        p.set_width(2);
        assert!(
            matches!(p.next(), Some(RawItem::Malformed { line: 1, message }) if message.contains("more than 2 fields"))
        );
        // A one-line record with too many fields is left to the caller (it names the count).
        let mut p = Parser::new(b"a,1,2\n");
        p.set_width(2);
        assert!(matches!(p.next(), Some(RawItem::Record(r)) if r.fields.len() == 3));
    }

    #[test]
    fn crlf_multi_line_field_keeps_its_bytes() {
        let got = records(b"\"a\r\nb\",1\r\nc,0\r\n");
        assert_eq!(
            got,
            vec![Ok((1, strs(&["a\r\nb", "1"]))), Ok((3, strs(&["c", "0"])))]
        );
    }
}
