//! Tests of `gzip` and `zip`: round trips, options, errors, `--allow-fs`, and the cap
//! on decompressed data.

use std::io::Write;

use crate::script::builtins::snippets::{eval, eval_allowing};

/// A fresh directory for one test, and its path as a Starlark string literal.
fn temp_dir(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("kite-archive-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lit = format!("{:?}", dir.display().to_string());
    (dir, lit)
}

/// Gzip of `n` zero bytes: a few hundred KiB that decompress to `n`.
fn gzip_bomb(n: usize) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..n >> 20 {
        enc.write_all(&zeros).unwrap();
    }
    enc.finish().unwrap()
}

#[test]
fn gzip_sources_round_trip_in_memory() {
    let out = eval(
        "c = gzip.text('Hello').compress()\n\
         s = gzip.bytes(b'bin\\x00\\x01')\n\
         (type(c), str(gzip.bytes(c).decompress()), gzip.bytes(s.compress(level = 0)).decompress(), \
          gzip.bytes([104, 105]).data, gzip.bytes('hi').data, str(s), type(s), bool(gzip.text('')), \
          len(gzip.text('x' * 1000).compress(level = 9)) < 100, \
          gzip.bytes(gzip.text('y').compress(level = -2)).decompress())",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"("bytes", "Hello", b"bin\x00\x01", b"hi", b"hi", "gzip.source(5 bytes)", "gzip.source", False, True, b"y")"#
    );
    // Several members decompress as one, as Go's reader does.
    let member = |s: &str| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(s.as_bytes()).unwrap();
        enc.finish().unwrap()
    };
    let both = [member("ab"), member("cd")].concat();
    let mut out = Vec::new();
    super::gzip::decompress_into("t", both.as_slice(), &mut out).unwrap();
    assert_eq!(out, b"abcd");
}

#[test]
fn gzip_errors_and_results() {
    let e = eval("gzip.text('x').compress(level = 10)").unwrap_err();
    assert!(
        e.contains("gzip.compress: invalid compression level 10 (must be -2 to 9)"),
        "{e}"
    );
    let out = eval(
        "r = gzip.text('not gzip').try_decompress()\n\
         e = gzip.bytes(b'').try_decompress()\n\
         (r.ok, r.error, e.error, gzip.try_bytes(1).ok, gzip.try_text('a').value.data)",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"(False, "gzip.decompress: invalid gzip header", "gzip.decompress: no gzip data (empty input)", False, b"a")"#
    );
    let e = eval("gzip.bytes(1.5)").unwrap_err();
    assert!(
        e.contains("gzip.bytes: argument must be bytes or string, got float"),
        "{e}"
    );
}

#[test]
fn gzip_files_need_allow_fs_and_keep_what_was_there_on_failure() {
    let e = eval("gzip.file('/tmp/a.gz').compress('/etc/hostname')").unwrap_err();
    assert!(e.contains("gzip.file.compress needs --allow-fs"), "{e}");
    let e = eval("gzip.text('a').compress(dest = '/tmp/a.gz')").unwrap_err();
    assert!(e.contains("gzip.compress needs --allow-fs"), "{e}");
    let (dir, d) = temp_dir("gzfiles");
    std::fs::write(dir.join("bad.gz"), "not gzip").unwrap();
    std::fs::write(dir.join("bad"), "kept").unwrap();
    std::fs::write(dir.join("target.gz"), "old").unwrap();
    std::os::unix::fs::symlink(dir.join("target.gz"), dir.join("link.gz")).unwrap();
    let out = eval_allowing(&format!(
        "write_text({d} + '/src.txt', 'file content')\n\
         gzip.file({d} + '/src.txt.gz').compress({d} + '/src.txt', level = 9)\n\
         fs.path({d} + '/src.txt').remove()\n\
         gzip.file({d} + '/src.txt.gz').decompress()\n\
         r = gzip.file({d} + '/bad.gz').try_decompress()\n\
         n = gzip.file({d} + '/x').try_decompress()\n\
         gzip.text('via link').compress(dest = {d} + '/link.gz')\n\
         (read_text({d} + '/src.txt'), r.ok, read_text({d} + '/bad'), n.error, str(gzip.file('/p.gz')))"
    ))
    .unwrap();
    assert_eq!(
        out,
        r#"("file content", False, "kept", "gzip.file.decompress: cannot derive output path (no .gz suffix); specify destination explicitly", "gzip.file(\"/p.gz\")")"#
    );
    // The link was written through: it is still a link, its target holds the data.
    assert!(
        std::fs::symlink_metadata(dir.join("link.gz"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let target = std::fs::read(dir.join("target.gz")).unwrap();
    assert_eq!(&target[..2], &[0x1f, 0x8b]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn decompression_stops_at_the_cap() {
    let bomb = gzip_bomb(257 << 20);
    let mut sink = Vec::new();
    let e =
        super::gzip::decompress_into("gzip.decompress", bomb.as_slice(), &mut sink).unwrap_err();
    assert_eq!(
        e,
        "gzip.decompress: the data decompresses to more than kite's 256 MiB limit"
    );
    let (dir, d) = temp_dir("bomb");
    std::fs::write(dir.join("bomb.gz"), &bomb).unwrap();
    let e = eval_allowing(&format!("gzip.file({d} + '/bomb.gz').decompress()")).unwrap_err();
    assert!(e.contains("more than kite's 256 MiB limit"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "only the bomb itself is left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zip_archives_are_written_listed_and_read() {
    let (dir, d) = temp_dir("zip");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a.txt"), "alpha").unwrap();
    std::fs::write(dir.join("b.go"), "beta").unwrap();
    std::fs::write(dir.join("sub/c.txt"), "gamma").unwrap();
    let out = eval_allowing(&format!(
        "z = zip.file({d} + '/one.zip')\n\
         z.write({d} + '/a.txt')\n\
         one = (z.namelist(), str(z.read('a.txt')))\n\
         z.write({d} + '/a.txt', name = 'dir/renamed.txt')\n\
         two = z.namelist()\n\
         m = zip.file({d} + '/many.zip')\n\
         m.write_all(match = {d} + '/**/*.txt', base_dir = {d}, level = 0)\n\
         names = sorted(m.namelist())\n\
         txt = m.namelist(match = '*.txt')\n\
         sub = m.namelist(match = 'sub/*')\n\
         all = m.read_all()\n\
         chosen = m.read_all(files = ['sub/c.txt'])\n\
         f = zip.file({d} + '/files.zip')\n\
         f.write_all(files = [{d} + '/b.go'], level = 9)\n\
         (one, two, names, len(txt), sub, sorted(all.keys()), chosen, \
          f.namelist() == [{d} + '/b.go'], str(z), type(z), bool(z), z.path)"
    ))
    .unwrap();
    let expected = format!(
        "(([\"a.txt\"], \"alpha\"), [\"dir/renamed.txt\"], [\"a.txt\", \"sub/c.txt\"], 2, [\"sub/c.txt\"], \
         [\"a.txt\", \"sub/c.txt\"], {{\"sub/c.txt\": b\"gamma\"}}, True, \"zip.file(\\\"{0}/one.zip\\\")\", \
         \"zip.archive\", True, \"{0}/one.zip\")",
        dir.display()
    );
    assert_eq!(out, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zip_errors_name_the_call() {
    let (dir, d) = temp_dir("ziperr");
    std::fs::write(dir.join("a.txt"), "alpha").unwrap();
    std::fs::write(dir.join("junk.zip"), "not a zip").unwrap();
    let out = eval_allowing(&format!(
        "z = zip.file({d} + '/z.zip')\n\
         z.write({d} + '/a.txt')\n\
         (z.try_read('nope').error, z.try_write_all().error, \
          z.try_write_all(match = '*', files = ['a']).error, \
          z.try_read_all(match = '*', files = ['a']).error, \
          z.try_write_all(files = ['a'], level = 11).error, \
          'zip.namelist: ' in zip.file({d} + '/junk.zip').try_namelist().error, \
          'No such file' in zip.file({d} + '/none.zip').try_read('a').error, \
          'No such file' in z.try_write({d} + '/missing.txt').error, z.namelist())"
    ))
    .unwrap();
    assert_eq!(
        out,
        "(\"zip.read: file \\\"nope\\\" not found in archive\", \"zip.write_all: must specify match or files\", \
         \"zip.write_all: match and files are mutually exclusive\", \"zip.read_all: match and files are mutually exclusive\", \
         \"zip.write_all: invalid compression level 11 (must be -2 to 9)\", True, True, True, [\"a.txt\"])"
    );
    let e = eval("zip.file('/tmp/x.zip').namelist()").unwrap_err();
    assert!(e.contains("zip.namelist needs --allow-fs"), "{e}");
    let e = eval("zip.file('/tmp/x.zip').write('/etc/hostname')").unwrap_err();
    assert!(e.contains("zip.write needs --allow-fs"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zip_entries_are_only_names_and_bounded() {
    let (dir, d) = temp_dir("zipbomb");
    let file = std::fs::File::create(dir.join("hostile.zip")).unwrap();
    let mut w = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1));
    w.start_file("../escape.txt", opts).unwrap();
    w.write_all(b"outside").unwrap();
    w.start_file("zeros", opts).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..257 {
        w.write_all(&zeros).unwrap();
    }
    w.finish().unwrap();
    let out = eval_allowing(&format!(
        "z = zip.file({d} + '/hostile.zip')\n\
         (str(z.read('../escape.txt')), z.try_read('zeros').error, z.try_read_all().error)"
    ))
    .unwrap();
    assert_eq!(
        out,
        "(\"outside\", \"zip.read: the entries decompress to more than kite's 256 MiB limit\", \
         \"zip.read_all: the entries decompress to more than kite's 256 MiB limit\")"
    );
    assert!(!dir.parent().unwrap().join("escape.txt").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
