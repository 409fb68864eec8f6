//! A strict RFC 4180 CSV splitter. The `csv` crate is lenient by design: text after a closing
//! quote is silently appended, so a row with a stray quote swallows the next line and still
//! "parses". Review files exported from pandas are well-formed, so here such a row is an error
//! naming the line where its record starts, and reading can resume at the next line.
//!
//! Rules: fields are separated by `,`, records by `\n` or `\r\n`; a field that starts with `"`
//! is quoted, `""` inside it is a literal quote, and after its closing quote only `,`, a line
//! end or the end of the file may follow. A `"` inside an unquoted field is taken literally
//! (unambiguous, and common in hand-written files). Empty lines are skipped.

/// One record: the 1-based line it starts on and its raw fields (bytes; UTF-8 is checked by
/// the caller so that it can name the field).
#[derive(Debug)]
pub(crate) struct RawRecord {
    pub line: u64,
    pub fields: Vec<Vec<u8>>,
}

/// A record or a malformed one (with the line it starts on).
#[derive(Debug)]
pub(crate) enum RawItem {
    Record(RawRecord),
    Malformed { line: u64, message: String },
}

/// Split `bytes` into records.
pub(crate) fn parse(bytes: &[u8]) -> Vec<RawItem> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut line: u64 = 1;
    let n = bytes.len();
    while i < n {
        // Skip empty lines between records.
        if bytes[i] == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            line += 1;
            i += 2;
            continue;
        }
        let start_line = line;
        let mut fields = Vec::new();
        let mut error: Option<String> = None;
        // Parse fields until the end of the record.
        loop {
            let mut field = Vec::new();
            if i < n && bytes[i] == b'"' {
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
                    error = Some(format!(
                        "quoted field opened on line {start_line} is never closed (runs to the end of the file)"
                    ));
                    break;
                }
                let at_end = i >= n
                    || bytes[i] == b','
                    || bytes[i] == b'\n'
                    || (bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n'));
                if !at_end {
                    let ch = String::from_utf8_lossy(&bytes[i..(i + 4).min(n)]).into_owned();
                    error = Some(format!(
                        "text {ch:?} after a closing quote on line {line} (unbalanced or unescaped double quote; quotes inside a quoted field must be doubled)"
                    ));
                    break;
                }
            } else {
                while i < n
                    && bytes[i] != b','
                    && bytes[i] != b'\n'
                    && !(bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n'))
                {
                    field.push(bytes[i]);
                    i += 1;
                }
            }
            fields.push(field);
            if i < n && bytes[i] == b',' {
                i += 1;
                continue;
            }
            // Line end or end of file.
            if i < n && bytes[i] == b'\r' {
                i += 1;
            }
            if i < n && bytes[i] == b'\n' {
                i += 1;
                line += 1;
            }
            break;
        }
        match error {
            None => out.push(RawItem::Record(RawRecord {
                line: start_line,
                fields,
            })),
            Some(message) => {
                // Resynchronise at the next line end.
                while i < n && bytes[i] != b'\n' {
                    i += 1;
                }
                if i < n {
                    i += 1;
                    line += 1;
                }
                out.push(RawItem::Malformed {
                    line: start_line,
                    message,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(s: &[u8]) -> Vec<Result<(u64, Vec<String>), u64>> {
        parse(s)
            .into_iter()
            .map(|it| match it {
                RawItem::Record(r) => Ok((
                    r.line,
                    r.fields
                        .iter()
                        .map(|f| String::from_utf8_lossy(f).into_owned())
                        .collect(),
                )),
                RawItem::Malformed { line, .. } => Err(line),
            })
            .collect()
    }

    #[test]
    fn well_formed() {
        let got = records(b"a,b\r\n\"x, \"\"y\"\"\",1\n\n\"multi\nline\",2\nlast,\n");
        let want: Vec<Result<(u64, Vec<String>), u64>> = vec![
            Ok((1, vec!["a".into(), "b".into()])),
            Ok((2, vec!["x, \"y\"".into(), "1".into()])),
            Ok((4, vec!["multi\nline".into(), "2".into()])),
            Ok((6, vec!["last".into(), "".into()])),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn no_final_newline_and_literal_quote_in_unquoted_field() {
        let got = records(b"he said \"hi\",1");
        assert_eq!(
            got,
            vec![Ok((1, vec!["he said \"hi\"".into(), "1".into()]))]
        );
    }

    #[test]
    fn text_after_closing_quote_resyncs_next_line() {
        let got = records(b"\"ok\",1\n\"bad\"x,1\n\"fine\",0\n");
        assert_eq!(got[1], Err(2));
        assert_eq!(got[2], Ok((3, vec!["fine".into(), "0".into()])));
    }

    #[test]
    fn unterminated_quote() {
        let got = records(b"\"ok\",1\n\"open,1\nmore,0\n");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], Err(2));
    }
}
