//! Tests of the `fs` module: each function's success, its error and its denial without --allow-fs.

use crate::script::builtins::snippets::{eval, eval_allowing, eval_permitted};
use crate::script::permissions::{Access, Permissions};

/// A fresh directory for one test, and its path as a Starlark string literal.
fn temp_dir(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("kite-fs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let lit = format!("{:?}", dir.display().to_string());
    (dir, lit)
}

fn fs_only(code: &str) -> Result<String, String> {
    eval_permitted(Permissions::only(Access::Fs), code)
}

#[test]
fn path_arithmetic_needs_no_flag() {
    let out = eval(
        "c = path('/var/log/app') / 'errors' / 'today.log'\n\
         [c.string, c.name, c.stem, c.suffix, c.parts, c.parent.string, str(c)]",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"["/var/log/app/errors/today.log", "today.log", "today", ".log", ("/", "var", "log", "app", "errors", "today.log"), "/var/log/app/errors", "path(\"/var/log/app/errors/today.log\")"]"#
    );
    let out = eval(
        "p = fs.path('/a/b/report.md')\n\
         [p.with_name('x.txt').string, p.with_suffix('.txt').string, p.with_suffix('').string, \
          p.join('c', 'd').string, path('a/./b/../c//d').clean().string, p.is_absolute(), \
          path('x').is_absolute(), p.is_relative_to('/a'), p.relative_to('/a').string, \
          p.match('*.md'), p.match('b/*.md'), p.match('/b/*.md'), path('x') == path('x')]",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"["/a/b/x.txt", "/a/b/report.txt", "/a/b/report", "/a/b/report.md/c/d", "a/c/d", True, False, True, "b/report.md", True, True, False, True]"#
    );
    let e = eval("path('/a/b').relative_to('/c')").unwrap_err();
    assert!(e.contains("Path.relative_to: /a/b is not under /c"), "{e}");
    let e = eval("path(1)").unwrap_err();
    assert!(
        e.contains("path: expected a path (string or Path), not int"),
        "{e}"
    );
    assert_eq!(
        eval("[repr(path('a b')), str(path('a')), type(path('a'))]").unwrap(),
        r#"["path(\"a b\")", "path(\"a\")", "fs.path"]"#
    );
}

#[test]
fn files_are_written_read_and_described() {
    let (dir, d) = temp_dir("io");
    let out = fs_only(&format!(
        "p = path({d}) / 'report.txt'\n\
         p.write_text('Summary\\n')\n\
         p.append_text('Details\\n')\n\
         b = path({d}) / 'data.bin'\n\
         b.write_bytes([0, 255, 7])\n\
         b.append_bytes('A')\n\
         s = p.stat()\n\
         [p.read_text(), b.read_bytes(), p.exists(), p.is_file(), p.is_dir(), p.is_symlink(), \
          s['size'], s['mode'], s['is_dir'], type(p.owner()), type(p.group()), \
          read_text(p), exists(p.string), exists({d} + '/nope'), s['perm'], len(s['mod_time'])]"
    ))
    .unwrap();
    assert_eq!(
        out,
        r#"["Summary\nDetails\n", b"\x00\xff\x07A", True, True, False, False, 16, "-rw-r--r--", False, "string", "string", "Summary\nDetails\n", True, False, 420, 20]"#
    );
    let out = fs_only(&format!(
        "write_text({d} + '/g.txt', 'x')\nwrite_bytes({d} + '/g.bin', [1])\nwrite_bytes({d} + '/h.bin', b'\\x02z')\n[read_bytes({d} + '/g.bin'), read_text({d} + '/g.txt'), read_bytes({d} + '/h.bin')]"
    ))
    .unwrap();
    assert_eq!(out, r#"[b"\x01", "x", b"\x02z"]"#);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn failures_name_the_call_the_path_and_the_os_error() {
    let (dir, d) = temp_dir("err");
    let e = fs_only(&format!("path({d} + '/missing.txt').read_text()")).unwrap_err();
    assert!(
        e.contains(&format!(
            "Path.read_text: {}/missing.txt: no such file or directory",
            dir.display()
        )),
        "{e}"
    );
    let e = fs_only(&format!("read_text({d} + '/missing.txt')")).unwrap_err();
    assert!(
        e.contains("read_text: ") && e.contains("no such file"),
        "{e}"
    );
    std::fs::write(dir.join("bad.txt"), [0xff, 0xfe]).unwrap();
    let e = fs_only(&format!("path({d} + '/bad.txt').read_text()")).unwrap_err();
    assert!(e.contains("not UTF-8 text"), "{e}");
    let e = fs_only(&format!("path({d}).write_bytes([256])")).unwrap_err();
    assert!(
        e.contains("Path.write_bytes: data: item 0 (256) is not an integer 0..255"),
        "{e}"
    );
    let out = fs_only(&format!(
        "r = path({d} + '/missing.txt').try_read_text()\n(r.ok, r.value, 'no such file' in r.error)"
    ))
    .unwrap();
    assert_eq!(out, "(False, None, True)");
    let out = fs_only(&format!("path({d}).try_is_dir().value")).unwrap();
    assert_eq!(out, "True");
    let e = eval("path('x').try_nothing()").unwrap_err();
    assert!(e.contains("try_nothing"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn reads_are_capped() {
    let (dir, d) = temp_dir("cap");
    let big = std::fs::File::create(dir.join("big")).unwrap();
    big.set_len(super::READ_CAP + 1).unwrap();
    let e = fs_only(&format!("path({d} + '/big').read_bytes()")).unwrap_err();
    assert!(e.contains("larger than kite's 64 MiB read limit"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn file_operations() {
    let (dir, d) = temp_dir("ops");
    let out = fs_only(&format!(
        "base = path({d})\n\
         a = base / 'a.txt'\n\
         a.touch()\n\
         a.write_text('hello')\n\
         a.truncate(4)\n\
         a.chmod(0o600)\n\
         a.chown()\n\
         b = a.copy_to(base / 'b.txt')\n\
         c = b.rename(base / 'c.txt')\n\
         m = c.move_to((base / 'm.txt').string)\n\
         link = base / 'link'\n\
         link.symlink_to('m.txt')\n\
         hard = base / 'hard'\n\
         hard.hardlink_to(a)\n\
         [a.read_text(), a.stat()['mode'], b.exists(), c.exists(), m.read_text(), \
          link.is_symlink(), link.readlink().string, link.read_text(), hard.read_text(), \
          (base / 'link').resolve().string == (base / 'm.txt').string]"
    ))
    .unwrap();
    assert_eq!(
        out,
        r#"["hell", "-rw-------", False, False, "hell", True, "m.txt", "hell", "hell", True]"#
    );
    let e = fs_only(&format!("path({d} + '/nope').rename({d} + '/x')")).unwrap_err();
    assert!(
        e.contains("Path.rename: ") && e.contains("/nope: to "),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn directories_list_glob_walk_and_remove() {
    let (dir, d) = temp_dir("dirs");
    let out = fs_only(&format!(
        "base = path({d})\n\
         (base / 'src' / 'pkg').mkdir()\n\
         (base / 'src' / 'main.go').write_text('m')\n\
         (base / 'src' / 'pkg' / 'lib.go').write_text('l')\n\
         (base / 'src' / 'README').write_text('r')\n\
         (base / 'src').mkdir()\n\
         names = [p.name for p in (base / 'src').listdir()]\n\
         gos = [p.relative_to(base).string for p in base.glob('**/*.go')]\n\
         top = [p.name for p in (base / 'src').glob('*.go')]\n\
         walked = [(w[0].relative_to(base).string, w[1], w[2]) for w in base.walk()]\n\
         du = base.disk_usage()\n\
         [names, gos, top, walked, du['total'] >= du['free'] and du['total'] > 0]"
    ))
    .unwrap();
    assert_eq!(
        out,
        r#"[["README", "main.go", "pkg"], ["src/main.go", "src/pkg/lib.go"], ["main.go"], [(".", ["src"], []), ("src", ["pkg"], ["README", "main.go"]), ("src/pkg", [], ["lib.go"])], True]"#
    );
    let out = fs_only(&format!(
        "os.chdir({d})\nglob('src/**/*.go') + [p.string for p in path('src').glob('*.go')]"
    ))
    .unwrap();
    assert_eq!(out, r#"["src/main.go", "src/pkg/lib.go", "src/main.go"]"#);
    let e = fs_only(&format!("path({d} + '/src').remove()")).unwrap_err();
    assert!(
        e.contains("Path.remove: ") && e.contains("src: directory not empty"),
        "{e}"
    );
    let e = fs_only(&format!("path({d} + '/a/b').mkdir(parents = False)")).unwrap_err();
    assert!(
        e.contains("Path.mkdir: ") && e.contains("no such file"),
        "{e}"
    );
    fs_only(&format!("path({d} + '/src').remove(recursive = True)")).unwrap();
    assert!(!dir.join("src").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn everything_on_disk_needs_allow_fs() {
    for call in [
        "path('/tmp').exists()",
        "path('/tmp').read_text()",
        "path('/tmp/x').write_text('x')",
        "path('/tmp').listdir()",
        "path('/tmp').resolve()",
        "path('~').expanduser()",
        "read_text('/etc/hostname')",
        "write_text('/tmp/x', 'x')",
        "exists('/tmp')",
        "glob('*')",
    ] {
        let e = eval_permitted(Permissions::all().with(Access::Fs, false), call).unwrap_err();
        assert!(
            e.contains("permission denied: ") && e.contains(" needs --allow-fs (or --allow-all)"),
            "{call}: {e}"
        );
    }
    let e = eval("path('/tmp').exists()").unwrap_err();
    assert!(
        e.contains("permission denied: Path.exists needs --allow-fs"),
        "{e}"
    );
    let r = eval("path('/tmp').try_exists()").unwrap();
    assert!(
        r.contains("ok=False") && r.contains("permission denied"),
        "{r}"
    );
    let home = eval_allowing("path('~/x').expanduser().string").unwrap();
    assert!(home.ends_with("/x\"") && !home.contains('~'), "{home}");
}

#[test]
fn modes_and_errors_read_as_go_writes_them() {
    assert_eq!(
        super::go_error("No such file or directory (os error 2)"),
        "no such file or directory"
    );
    assert_eq!(super::go_error("EOF reached"), "EOF reached");
    assert_eq!(super::go_error(""), "");
    let (dir, d) = temp_dir("modes");
    let out = fs_only(&format!(
        "p = path({d})\np.chmod(0o1755)\n[p.stat()['mode'], (p / 'x').try_read_text().error.endswith('x: no such file or directory')]"
    ))
    .unwrap();
    assert_eq!(out, r#"["dtrwxr-xr-x", True]"#);
    std::fs::remove_dir_all(dir).unwrap();
}
