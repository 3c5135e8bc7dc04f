//! Tests of the `os` module: the env overlay, exec and its limits, and each permission.

use crate::script::builtins::snippets::{eval, eval_allowing, eval_permitted};
use crate::script::permissions::{Access, Permissions};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kite-os-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

#[test]
fn env_reads_the_overlay_without_touching_the_process() {
    let out = eval_permitted(
        Permissions::only(Access::Env),
        "os.setenv('KITE_OS_TEST_VAR', 'v1')\n[os.env('KITE_OS_TEST_VAR'), os.env('KITE_OS_UNSET', 'dflt'), os.env('KITE_OS_UNSET')]",
    )
    .unwrap();
    assert_eq!(out, r#"["v1", "dflt", ""]"#);
    assert!(
        std::env::var("KITE_OS_TEST_VAR").is_err(),
        "the process env is untouched"
    );
    let e = eval_allowing("os.setenv('A=B', 'x')").unwrap_err();
    assert!(
        e.contains("os.setenv: invalid variable name \"A=B\""),
        "{e}"
    );
}

#[test]
fn env_and_setenv_are_also_globals() {
    let out = eval_permitted(
        Permissions::only(Access::Env),
        "setenv('KITE_OS_GLOBAL_VAR', 'g')\n[env('KITE_OS_GLOBAL_VAR'), os.env('KITE_OS_GLOBAL_VAR'), env('KITE_OS_UNSET', 'd')]",
    )
    .unwrap();
    assert_eq!(out, r#"["g", "g", "d"]"#);
    let e = eval("env('HOME')").unwrap_err();
    assert!(e.contains("allow-env"), "{e}");
}

#[test]
fn env_needs_allow_env() {
    let e = eval("os.env('HOME')").unwrap_err();
    assert!(
        e.contains("permission denied: os.env needs --allow-env (or --allow-all)"),
        "{e}"
    );
    let e = eval("os.setenv('X', '1')").unwrap_err();
    assert!(
        e.contains("permission denied: os.setenv needs --allow-env"),
        "{e}"
    );
    let r = eval("r = os.try_env('HOME')\n(r.ok, 'permission denied' in r.error)").unwrap();
    assert_eq!(r, "(False, True)");
    let r = eval_allowing("r = os.try_setenv('X', '1')\nr.ok").unwrap();
    assert_eq!(r, "True");
}

#[test]
fn chdir_moves_the_scripts_directory_only() {
    let dir = temp_dir("chdir");
    let before = std::env::current_dir().unwrap();
    let out = eval_permitted(
        Permissions::only(Access::Fs),
        &format!(
            "os.chdir({:?})\n[os.cwd(), cwd()]",
            dir.display().to_string()
        ),
    )
    .unwrap();
    let shown = format!("{:?}", dir.display().to_string());
    assert_eq!(out, format!("[{shown}, {shown}]"));
    assert_eq!(std::env::current_dir().unwrap(), before);
    let e = eval_allowing("os.chdir('/nonexistent/kite/dir')").unwrap_err();
    assert!(
        e.contains("os.chdir: /nonexistent/kite/dir: no such file"),
        "{e}"
    );
    let r = eval_allowing("os.try_chdir('/nonexistent/kite/dir').ok").unwrap();
    assert_eq!(r, "False");
    let e = eval("os.chdir('/')").unwrap_err();
    assert!(
        e.contains("permission denied: os.chdir needs --allow-fs"),
        "{e}"
    );
    // Reading it is a fact about the process, as hostname() is.
    assert_eq!(eval("os.cwd() == cwd() and cwd() != ''").unwrap(), "True");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn process_facts_need_no_flag() {
    let out = eval(
        "[type(os.hostname()), os.hostname() == hostname(), os.pid() > 0, os.ppid() >= 0, \
         type(os.username()), int(os.userid()) >= 0, int(os.groupid()) >= 0]",
    )
    .unwrap();
    assert_eq!(out, r#"["string", True, True, True, "string", True, True]"#);
    assert_eq!(
        eval("str(os.pid())").unwrap(),
        format!("\"{}\"", std::process::id())
    );
}

#[test]
fn home_needs_allow_fs() {
    assert_eq!(eval_allowing("type(os.home())").unwrap(), "\"string\"");
    let e = eval("os.home()").unwrap_err();
    assert!(
        e.contains("permission denied: os.home needs --allow-fs"),
        "{e}"
    );
}

#[test]
fn exit_hands_over_its_code() {
    let e = eval("os.exit(3)\nprint('not reached')").unwrap_err();
    assert!(e.contains("os.exit(3): the script exited"), "{e}");
    let e = eval("os.exit(300)").unwrap_err();
    assert!(e.contains("os.exit: code 300 is not in 0..255"), "{e}");
}

#[test]
fn which_finds_programs_on_path() {
    let out = eval_permitted(
        Permissions::only(Access::Exec),
        "[os.which('sh').endswith('/sh'), os.which('kite-no-such-program'), os.try_which('sh').ok]",
    )
    .unwrap();
    assert_eq!(out, "[True, None, True]");
    let e = eval("os.which('sh')").unwrap_err();
    assert!(
        e.contains("permission denied: os.which needs --allow-exec (or --allow-all)"),
        "{e}"
    );
}

#[test]
fn exec_returns_stdout_and_takes_upstreams_options() {
    let only_exec = Permissions::only(Access::Exec).with(Access::Env, true);
    assert_eq!(
        eval_permitted(only_exec, "os.exec('echo hello world')").unwrap(),
        "\"hello world\\n\""
    );
    // As upstream, a command line is the shell's: quotes, pipes and variables work.
    assert_eq!(
        eval_permitted(
            only_exec,
            "os.exec(\"echo 'a  b' $X | tr a A\", env = {'X': 'x'})"
        )
        .unwrap(),
        "\"A  b x\\n\""
    );
    assert_eq!(
        eval_permitted(
            only_exec,
            "exec('sh', ['-c', 'echo $A-$B'], env = {'A': 'x'})"
        )
        .unwrap()
        .replace("\\n", ""),
        "\"x-\""
    );
    assert_eq!(
        eval_permitted(
            only_exec,
            "os.setenv('B', 'set')\nexec('sh', ['-c', 'echo $B'])"
        )
        .unwrap(),
        "\"set\\n\""
    );
    assert_eq!(
        eval_permitted(only_exec, "os.exec('cat', input = 'piped')").unwrap(),
        "\"piped\""
    );
    let dir = temp_dir("exec");
    let out = eval_permitted(
        only_exec,
        &format!("os.exec('pwd', cwd = {:?})", dir.display().to_string()),
    )
    .unwrap();
    assert_eq!(out, format!("{:?}", format!("{}\n", dir.display())));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn exec_fails_on_exit_codes_timeouts_and_missing_programs() {
    let e = eval_allowing("os.exec('sh', ['-c', 'echo oops >&2; exit 3'])").unwrap_err();
    assert!(e.contains("os.exec: sh exited with code 3: oops"), "{e}");
    let e = eval_allowing("os.exec('sleep', ['5'], timeout = '200ms')").unwrap_err();
    assert!(e.contains("timed out after 200ms and was killed"), "{e}");
    let e = eval_allowing("os.exec('kite-no-such-program', ['x'])").unwrap_err();
    assert!(
        e.contains("os.exec: program \"kite-no-such-program\" not found"),
        "{e}"
    );
    // A command line runs in the shell, which reports the missing program.
    let e = eval_allowing("os.exec('kite-no-such-program --flag')").unwrap_err();
    assert!(
        e.contains("os.exec: kite-no-such-program --flag exited with code 127"),
        "{e}"
    );
    let e = eval_allowing("os.exec('true', ['x'], shell = '/bin/bash')").unwrap_err();
    assert!(e.contains("shell= runs a command line"), "{e}");
    let e = eval_allowing("os.exec('true', output = 'x')").unwrap_err();
    assert!(e.contains("output= streams are not supported"), "{e}");
    let e = eval_allowing("os.exec('true', timeout = [])").unwrap_err();
    assert!(e.contains("os.exec: timeout: expected a duration"), "{e}");
    let e = eval_allowing("os.exec('sh', ['-c', 'head -c 20000000 /dev/zero'])").unwrap_err();
    assert!(
        e.contains("wrote more than 16 MiB to stdout and was killed"),
        "{e}"
    );
}

#[test]
fn exec_needs_allow_exec() {
    let e = eval_permitted(
        Permissions::all().with(Access::Exec, false),
        "os.exec('true')",
    )
    .unwrap_err();
    assert!(
        e.contains("permission denied: os.exec needs --allow-exec (or --allow-all)"),
        "{e}"
    );
    let e = eval("exec('true')").unwrap_err();
    assert!(
        e.contains("permission denied: exec needs --allow-exec"),
        "{e}"
    );
    let r = eval("r = try_exec('true')\n(r.ok, r.code, 'permission denied: try_exec' in r.error)")
        .unwrap();
    assert_eq!(r, "(False, -1, True)");
}

#[test]
fn try_exec_reports_instead_of_failing() {
    let out = eval_allowing(
        "r = os.try_exec('sh', ['-c', 'echo out; echo err >&2; exit 2'])\n\
         (r.ok, r.code, r.exit_code, r.stdout, r.stderr, r.error)",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"(False, 2, 2, "out\n", "err\n", "os.try_exec: sh exited with code 2")"#
    );
    let out = eval_allowing("r = try_exec('echo', ['hi'])\n(r.ok, r.stdout, r.error)").unwrap();
    assert_eq!(out, r#"(True, "hi\n", "")"#);
}

#[test]
fn upstreams_global_aliases_and_try_forms() {
    let out = eval_allowing(
        "[username() == os.username(), username() == user.name(), userid() == user.id(), groupid() == user.gid(), home() == user.home(), pid() == os.pid(), ppid() > 0, which('sh') == os.which('sh'), which('kite-no-such-program')]",
    )
    .unwrap();
    assert_eq!(
        out,
        "[True, True, True, True, True, True, True, True, None]"
    );
    let dir = temp_dir("alias-chdir");
    let out = eval_allowing(&format!(
        "chdir({:?})\nr = os.try_cwd()\n(r.ok, r.value == cwd(), type(r), os.try_hostname().ok, os.try_pid().value == pid())",
        dir.display().to_string()
    ))
    .unwrap();
    assert_eq!(out, "(True, True, \"Result\", True, True)");
    // The aliases check what the module's functions check.
    let e = eval("chdir('/')").unwrap_err();
    assert!(
        e.contains("permission denied: os.chdir needs --allow-fs"),
        "{e}"
    );
    let e = eval("which('sh')").unwrap_err();
    assert!(
        e.contains("permission denied: os.which needs --allow-exec"),
        "{e}"
    );
    let e = eval("user.home()").unwrap_err();
    assert!(
        e.contains("permission denied: user.home needs --allow-fs"),
        "{e}"
    );
    let r = eval("r = os.try_home()\n(r.ok, 'allow-fs' in r.error)").unwrap();
    assert_eq!(r, "(False, True)");
    std::fs::remove_dir_all(dir).unwrap();
}
