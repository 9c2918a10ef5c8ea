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

/// A record: the line's JSON object, with the non-finite values Python wrote (as null in the
/// object) given by their top-level key. `None` when the line is not a JSON object.
pub fn parse_record(line: &[u8]) -> Option<(Map<String, Value>, HashMap<String, f64>)> {
    if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(line) {
        return Some((record, HashMap::new()));
    }
    let marked = mark_tokens(line)?;
    let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(&marked) else {
        return None;
    };
    let mut non_finite = HashMap::new();
    for (key, value) in record.iter_mut() {
        if let Some(x) = unmark(value) {
            non_finite.insert(key.clone(), x);
        }
    }
    Some((record, non_finite))
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

/// Turns the marked strings in `value` back: nulls in the record; the value when `value` itself
/// was one.
fn unmark(value: &mut Value) -> Option<f64> {
    match value {
        Value::String(s) => {
            let x = match s.strip_prefix(MARK)? {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                _ => f64::NEG_INFINITY,
            };
            *value = Value::Null;
            Some(x)
        }
        Value::Array(items) => {
            items.iter_mut().for_each(|v| {
                unmark(v);
            });
            None
        }
        Value::Object(map) => {
            map.values_mut().for_each(|v| {
                unmark(v);
            });
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_non_finite_tokens_read_as_numbers_outside_strings_only() {
        let (r, nf) = parse_record(br#"{"m": NaN, "loss": -Infinity, "note": "NaN, Infinity", "x": [Infinity, 1], "epoch": 2}"#).unwrap();
        assert!(nf["m"].is_nan());
        assert_eq!(nf["loss"], f64::NEG_INFINITY);
        assert_eq!(nf.len(), 2);
        assert_eq!(r["m"], Value::Null);
        assert_eq!(r["note"], "NaN, Infinity");
        assert_eq!(r["x"], serde_json::json!([null, 1]));
        assert_eq!(r["epoch"], 2);
        // Plain JSON takes the fast path; other bad lines are not records.
        let (r, nf) = parse_record(br#"{"m": 1.5}"#).unwrap();
        assert_eq!((r["m"].as_f64(), nf.len()), (Some(1.5), 0));
        assert!(parse_record(br#"{"m": 1e400}"#).is_none());
        assert!(parse_record(b"NaN").is_none());
        assert!(parse_record(br#"{"s": "a \" NaN"}"#).is_some_and(|(_, nf)| nf.is_empty()));
    }
}
