//! docs/protocol.md is the protocol's definition for other implementations: its static table,
//! frame types and error codes must be the crate's.

use webpep_proto::frame::ty;
use webpep_proto::headers::STATIC_TABLE;

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/protocol.md"
    ))
    .expect("docs/protocol.md")
}

#[test]
fn the_static_table_in_the_doc_is_the_crates() {
    let doc = doc();
    let rows: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| ") && l.chars().nth(2).is_some_and(|c| c.is_ascii_digit()))
        .filter(|l| {
            l.split('|')
                .nth(2)
                .is_some_and(|c| c.trim().starts_with('`'))
        })
        .collect();
    let want: Vec<String> = STATIC_TABLE
        .iter()
        .enumerate()
        .map(|(i, (n, v))| {
            let v = if v.is_empty() {
                String::new()
            } else {
                format!("`{v}`")
            };
            format!("| {i} | `{n}` | {v} |")
        })
        .collect();
    let rows: Vec<String> = rows
        .into_iter()
        .filter(|r| !r.contains("0x"))
        .map(|r| r.to_string())
        .collect();
    assert_eq!(rows, want);
}

#[test]
fn the_frame_types_and_error_codes_in_the_doc_are_the_crates() {
    let doc = doc();
    for (n, name) in [
        (ty::DATA, "DATA"),
        (ty::REQUEST, "REQUEST"),
        (ty::RESPONSE, "RESPONSE"),
        (ty::END, "END"),
        (ty::ERROR, "ERROR"),
        (ty::HELLO, "HELLO"),
        (ty::INSERT, "INSERT"),
        (ty::HEAD_ACK, "HEAD_ACK"),
        (ty::GOAWAY, "GOAWAY"),
    ] {
        let row = format!("| {n:#x} | `{name}` |");
        assert!(doc.contains(&row), "{row} missing");
    }
    use webpep_proto::code::*;
    for (n, name) in [
        (NO_ERROR, "NO_ERROR"),
        (PROTOCOL, "PROTOCOL"),
        (FRAME_TOO_LARGE, "FRAME_TOO_LARGE"),
        (VERSION_MISMATCH, "VERSION_MISMATCH"),
        (HEADER_COMPRESSION, "HEADER_COMPRESSION"),
        (REQUEST_REFUSED, "REQUEST_REFUSED"),
        (CANCELLED, "CANCELLED"),
        (UPSTREAM, "UPSTREAM"),
        (FORBIDDEN, "FORBIDDEN"),
        (INTERNAL, "INTERNAL"),
        (BODY, "BODY"),
    ] {
        let row = format!("| {n:#x} | `{name}` |");
        assert!(doc.contains(&row), "{row} missing");
    }
}
