use crate::script::builtins::snippets::{eval, eval_allowing};

#[test]
fn round_trip() {
    assert_eq!(eval("base64.encode('héllo')").unwrap(), "\"aMOpbGxv\"");
    assert_eq!(
        eval("base64.decode(base64.encode('héllo')) == 'héllo'").unwrap(),
        "True"
    );
    assert!(
        eval("base64.decode('!!')")
            .unwrap_err()
            .contains("base64.decode")
    );
    assert!(eval("base64.decode('/w==')").unwrap_err().contains("UTF-8"));
}

#[test]
fn sources_encode_and_decode_text_and_bytes() {
    assert_eq!(
        eval("[base64.text('Ma').encode(), base64.text('TWE=').decode(), base64.bytes(b'\\xff\\xfe').encode_url(), base64.text('__4=').decode_url()]").unwrap(),
        "[\"TWE=\", b\"Ma\", \"__4=\", b\"\\xff\\xfe\"]"
    );
    assert_eq!(
        eval("s = base64.text('hi')\n(s.data, type(s), bool(base64.text('')))").unwrap(),
        "(b\"hi\", \"base64.source\", False)"
    );
    // Line breaks are ignored when decoding, as Go's decoder does.
    assert_eq!(
        eval("base64.text('aGVs\\nbG8=\\r\\n').decode()").unwrap(),
        "b\"hello\""
    );
}

#[test]
fn bad_input_fails_or_is_a_result() {
    let e = eval("base64.text('!!').decode()").unwrap_err();
    assert!(
        e.contains("base64.source.decode: illegal base64 data"),
        "{e}"
    );
    let e = eval("base64.bytes(1)").unwrap_err();
    assert!(
        e.contains("base64.bytes: argument must be string or bytes, got int"),
        "{e}"
    );
    assert_eq!(
        eval("r = base64.text('!!').try_decode_url()\n(r.ok, r.value, 'decode_url' in r.error)")
            .unwrap(),
        "(False, None, True)"
    );
    assert_eq!(
        eval("r = base64.try_bytes(b'x')\n(r.ok, r.value.encode())").unwrap(),
        "(True, \"eA==\")"
    );
    assert_eq!(
        eval("r = base64.try_text(1)\n(r.ok, r.error)").unwrap(),
        "(False, \"base64.text: s must be a string, got int\")"
    );
}

#[test]
fn files_need_the_flag() {
    let e = eval("base64.file('Cargo.toml')").unwrap_err();
    assert!(e.contains("base64.file needs --allow-fs"), "{e}");
    let dir = std::env::temp_dir().join(format!("kite-base64-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.txt");
    std::fs::write(&path, "aGVsbG8=\n").unwrap();
    let p = path.display();
    assert_eq!(
        eval_allowing(&format!(
            "f = base64.file('{p}')\n(f.decode(), f.encode(), f.path == '{p}', type(f))"
        ))
        .unwrap(),
        "(b\"hello\", \"YUdWc2JHOD0K\", True, \"base64.file\")"
    );
    let out = eval_allowing(&format!(
        "r = base64.file('{p}.missing').try_encode()\n(r.ok, r.error)"
    ))
    .unwrap();
    assert_eq!(
        out,
        format!("(False, \"base64.file.encode: open {p}.missing: no such file or directory\")")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
