//! Work items from the command line, list files and stdin.
//!
//! A line (or an argument) is a path, or a JSON record that [`records::parse_input_line`]
//! understands (shard records, a previous stage's records). A line that cannot be used becomes an
//! error record naming it, and the rest continue. Stdin is read lazily, so a long `find | tool`
//! pipe starts working at once.

use std::fs::File;
use std::io::{self, BufRead, BufReader};

use records::{ErrorRecord, InputItem, parse_input_line};

/// One item or the reason a line gave none.
pub type Item = Result<InputItem, ErrorRecord>;

/// Items named by positional arguments: each argument is a path or a record; `-` reads items
/// from stdin, one per line. No arguments at all means stdin.
pub fn from_args(args: &[String]) -> Box<dyn Iterator<Item = Item> + Send> {
    if args.is_empty() {
        return lines_of(Box::new(BufReader::new(io::stdin())), "<stdin>".into());
    }
    let args = args.to_vec();
    Box::new(args.into_iter().flat_map(|arg| -> Box<dyn Iterator<Item = Item> + Send> {
        if arg == "-" {
            lines_of(Box::new(BufReader::new(io::stdin())), "<stdin>".into())
        } else {
            Box::new(parse(&arg).into_iter())
        }
    }))
}

/// Items listed in files, one per line (`cat` semantics: `-` or no files means stdin). A file
/// that cannot be opened gives one error record.
pub fn from_files(files: &[String]) -> Box<dyn Iterator<Item = Item> + Send> {
    let files = if files.is_empty() { vec!["-".to_string()] } else { files.to_vec() };
    Box::new(files.into_iter().flat_map(|f| -> Box<dyn Iterator<Item = Item> + Send> {
        if f == "-" {
            return lines_of(Box::new(BufReader::new(io::stdin())), "<stdin>".into());
        }
        match File::open(&f) {
            Ok(file) => lines_of(Box::new(BufReader::new(file)), f),
            Err(e) => Box::new(std::iter::once(Err(ErrorRecord {
                input: f.clone(),
                message: format!("cannot open list file: {e}"),
            }))),
        }
    }))
}

fn lines_of(reader: Box<dyn BufRead + Send>, source: String) -> Box<dyn Iterator<Item = Item> + Send> {
    Box::new(reader.split(b'\n').flat_map(move |line| match line {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(line) => parse(&line),
            Err(e) => vec![Err(ErrorRecord {
                input: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                message: "line is not UTF-8".into(),
            })],
        },
        Err(e) => vec![Err(ErrorRecord { input: source.clone(), message: format!("reading: {e}") })],
    }))
}

fn parse(line: &str) -> Vec<Item> {
    match parse_input_line(line) {
        Ok(items) => items.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(ErrorRecord { input: line.to_string(), message: e.to_string() })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_paths_or_records() {
        let items: Vec<Item> = from_args(&[
            "a.jpg".into(),
            r#"{"type":"shard","shard":0,"shards":1,"paths":["b","c"]}"#.into(),
            "{broken".into(),
        ])
        .collect();
        assert_eq!(items.len(), 4);
        assert_eq!(items[0].as_ref().unwrap().path, "a.jpg");
        assert_eq!(items[2].as_ref().unwrap().path, "c");
        assert_eq!(items[3].as_ref().unwrap_err().input, "{broken");
    }

    #[test]
    fn list_files_are_read_line_by_line_and_missing_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("list.txt");
        std::fs::write(&list, "x\n\ny\r\n").unwrap();
        let items: Vec<Item> =
            from_files(&[list.to_string_lossy().into_owned(), "/no/such/list".into()]).collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1].as_ref().unwrap().path, "y");
        assert!(items[2].as_ref().unwrap_err().message.contains("cannot open"));
    }
}
