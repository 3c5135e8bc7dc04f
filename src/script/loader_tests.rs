//! Tests of `load()`: module values, module directories, the search path, caching and
//! cycles.

use std::path::{Path, PathBuf};

use super::*;
use crate::script::library::Library;
use crate::script::permissions::Permissions;
use crate::script::vars::Vars;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kite-load-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Runs `main.star` in `dir`; its checks `fail()` with what they saw.
fn run(dir: &Path) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let host = Host::new(
        Library::standard(),
        Vars::default(),
        Permissions::default(),
        rt.handle().clone(),
    );
    crate::script::run::run(&dir.join("main.star"), &host)
        .map(drop)
        .map_err(|e| e.to_string())
}

const CHECK: &str =
    "def check(got, want):\n    if got != want:\n        fail('got %r, want %r' % (got, want))\n";

#[test]
fn a_file_is_also_a_module_value_named_after_it() {
    let dir = temp_dir("value");
    write(
        &dir,
        "lib/greeter.star",
        "def greet(n):\n    return 'hi ' + n\ndef _secret():\n    return 1\nloaded_at = _config.get('x', 'none')\n",
    );
    write(
        &dir,
        "lib/wrapper.star",
        "load('./greeter.star', 'greeter')\ndef shout(n):\n    return greeter.greet(n).upper()\n",
    );
    write(&dir, "lib/own.star", "def own():\n    return 'mine'\n");
    write(
        &dir,
        "main.star",
        &format!(
            "{CHECK}load('./lib/greeter.star', 'greeter', 'greet')\nload('./lib/wrapper.star', 'wrapper')\nload('lib/own.star', own = 'own')\n\
             check(greeter.greet('a'), 'hi a')\ncheck(greet('b'), 'hi b')\ncheck(type(greeter), 'module')\n\
             check(hasattr(greeter, '_secret'), False)\ncheck(dir(greeter), ['greet', 'loaded_at'])\ncheck(greeter.loaded_at, 'none')\n\
             check(wrapper.shout('c'), 'HI C')\ncheck(hasattr(wrapper, 'greeter'), False)\ncheck(own(), 'mine')\ncheck(str(greeter), '<module \"greeter\">')\n"
        ),
    );
    run(&dir).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn module_directories_merge_their_files_and_bare_names_are_searched() {
    let dir = temp_dir("dir");
    write(
        &dir,
        "modules/shapes/main.star",
        "def area(w, h):\n    return w * h\ndef _hidden():\n    pass\n",
    );
    write(
        &dir,
        "modules/shapes/extra.star",
        "load('../single.star', 'value')\ndef double(x):\n    return 2 * x\ndef _private():\n    pass\n",
    );
    write(&dir, "modules/single.star", "value = 7\n");
    write(
        &dir,
        "other/named/named.star",
        "def f():\n    return 'named'\n",
    );
    write(
        &dir,
        "main.star",
        &format!(
            "{CHECK}load('shapes', s = 'shapes')\nload('single', 'single', 'value')\nload('./other/named', 'named')\n\
             check([s.area(2, 3), s.double(4)], [6, 8])\ncheck(dir(s), ['area', 'double'])\n\
             check([single.value, value], [7, 7])\ncheck(named.f(), 'named')\n"
        ),
    );
    run(&dir).unwrap();
    let files = files_of(&dir, "shapes");
    assert_eq!(
        files,
        vec![
            dir.join("modules/shapes/main.star"),
            dir.join("modules/shapes/extra.star")
        ]
    );
    write(&dir, "main.star", "load('nowhere', 'nowhere')\n");
    let e = run(&dir).unwrap_err();
    assert!(
        e.contains("cannot load \"nowhere\": no module \"nowhere\" (nowhere.star or nowhere/) in ")
            && e.contains(&format!("{}/modules", dir.display())),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn files_run_once_per_run_and_cycles_are_errors() {
    let dir = temp_dir("once");
    write(&dir, "count.star", "print('LOADED')\nn = [1]\n");
    write(&dir, "a.star", "load('b.star', 'b')\nx = 1\n");
    write(&dir, "b.star", "load('a.star', 'a')\ny = 1\n");
    write(
        &dir,
        "main.star",
        &format!(
            "{CHECK}load('count.star', 'count')\nload('./count.star', c2 = 'count')\ncheck(count == c2, True)\ncheck(count.n, [1])\n"
        ),
    );
    run(&dir).unwrap();
    write(&dir, "main.star", "load('a.star', 'a')\n");
    let e = run(&dir).unwrap_err();
    assert!(
        e.contains("load cycle: ") && e.contains("a.star loads itself"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
