//! A trial's record line as Python writes it: `json.dumps` writes a non-finite float as the bare
//! token `NaN`, `Infinity` or `-Infinity` (its default `allow_nan=True`), which is not JSON and
//! which serde_json refuses. Ray Tune takes such a result (ASHA records a NaN and its cutoff
//! ignores it), so sweep reads them too.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// What stands for a non-finite token while serde_json parses the line: a string starting with
/// a control character (written escaped, as JSON requires), which a trial's own strings would
/// hardly start with.
const MARK: &str = "\u{1}nonfinite:";
/// [`MARK`] as JSON text.
const MARK_JSON: &str = "\\u0001nonfinite:";

/// A record: the line's JSON object, its non-finite values written as the sweep's records
/// spell them (the strings "NaN", "Infinity", "-Infinity"); those values by their top-level key;
/// and every one outside arrays by its path as `files::flatten` names it (`extra/loss`), for
/// the files that keep them as numbers. `None` when the line is not a JSON object.
pub fn parse_record(line: &[u8]) -> Option<Parsed> {
    if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line) {
        return Some((record, HashMap::new(), Vec::new()));
    }
    let marked = mark_tokens(line)?;
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(&marked) else {
        return None;
    };
    let mut top = HashMap::new();
    let mut paths = Vec::new();
    for (key, value) in record.iter_mut() {
        if let Some(x) = unmark(value, Some(key), &mut paths) {
            top.insert(key.clone(), x);
        }
    }
    Some((record, top, paths))
}

/// A record, its non-finite values by top-level key, and by path.
pub type Parsed = (Map<String, Value>, HashMap<String, f64>, Vec<(String, f64)>);

/// How a non-finite value is spelled in the sweep's records and files, as Python's JSON tokens.
pub fn spelling(x: f64) -> &'static str {
    if x.is_nan() {
        "NaN"
    } else if x > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

/// The line with each NaN, Infinity and -Infinity outside strings replaced by a marked string;
/// `None` when there is none (the line is bad JSON for another reason).
fn mark_tokens(line: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(line.len() + 32);
    let (mut in_string, mut escaped, mut found) = (false, false, false);
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        let token = [&b"NaN"[..], b"Infinity", b"-Infinity"]
            .into_iter()
            .find(|t| line[i..].starts_with(t));
        match (b, token) {
            (b'"', _) => {
                in_string = true;
                out.push(b);
                i += 1;
            }
            (_, Some(t)) => {
                let t = String::from_utf8_lossy(t);
                out.extend_from_slice(format!("\"{MARK_JSON}{t}\"").as_bytes());
                found = true;
                i += t.len();
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    found.then_some(out)
}

/// Turns the marked strings in `value` into the strings the records spell, noting each value
/// with its path (`path`: None inside an array, whose items `files::flatten` does not name);
/// the value when `value` itself was one.
fn unmark(value: &mut Value, path: Option<&str>, paths: &mut Vec<(String, f64)>) -> Option<f64> {
    match value {
        Value::String(s) => {
            let x = match s.strip_prefix(MARK)? {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                _ => f64::NEG_INFINITY,
            };
            *value = Value::String(spelling(x).into());
            if let Some(p) = path {
                paths.push((p.to_string(), x));
            }
            Some(x)
        }
        Value::Array(items) => {
            items.iter_mut().for_each(|v| {
                unmark(v, None, paths);
            });
            None
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let inner = path.map(|p| format!("{p}/{k}"));
                unmark(v, inner.as_deref(), paths);
            }
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record and its top-level non-finite values.
    fn parse_top(line: &[u8]) -> Option<(Map<String, Value>, HashMap<String, f64>)> {
        parse_record(line).map(|(record, top, _)| (record, top))
    }

    #[test]
    fn python_non_finite_tokens_read_as_numbers_outside_strings_only() {
        let (r, nf) = parse_top(br#"{"m": NaN, "loss": -Infinity, "note": "NaN, Infinity", "x": [Infinity, 1], "epoch": 2}"#).unwrap();
        assert!(nf["m"].is_nan());
        assert_eq!(nf["loss"], f64::NEG_INFINITY);
        assert_eq!(nf.len(), 2);
        assert_eq!(r["m"], "NaN");
        assert_eq!(r["loss"], "-Infinity");
        assert_eq!(r["note"], "NaN, Infinity");
        assert_eq!(r["x"], serde_json::json!(["Infinity", 1]));
        assert_eq!(r["epoch"], 2);
        // Plain JSON takes the fast path; other bad lines are not records.
        let (r, nf) = parse_top(br#"{"m": 1.5}"#).unwrap();
        assert_eq!((r["m"].as_f64(), nf.len()), (Some(1.5), 0));
        assert!(parse_top(br#"{"m": 1e400}"#).is_none());
        assert!(parse_top(b"NaN").is_none());
        assert!(parse_top(br#"{"s": "a \" NaN"}"#).is_some_and(|(_, nf)| nf.is_empty()));
        // Nested values by their flattened path (not in arrays, which are not flattened).
        let (_, _, paths) =
            parse_record(br#"{"a": {"b": -Infinity, "c": [NaN]}, "d": Infinity}"#).unwrap();
        assert_eq!(
            paths,
            [
                ("a/b".to_string(), f64::NEG_INFINITY),
                ("d".into(), f64::INFINITY)
            ]
        );
    }
}
