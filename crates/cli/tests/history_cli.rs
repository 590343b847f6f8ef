//! `xstore bench --history` against a real server process over tcp and
//! shm, checked by `xstore check`; and `xstore check` on hand-made bad
//! histories.

mod support;

use std::process::Command;

use support::{Scratch, ServerProcess};

fn xstore(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xstore"))
        .args(args)
        .env_remove("XSTORE_TOKEN")
        .output()
        .expect("run xstore")
}

#[test]
fn histories_over_tcp_and_shm_are_linearizable() {
    let dir = Scratch::new("history");
    std::fs::create_dir_all(dir.path()).unwrap();
    let shm = dir.path().join("shm");
    let server = ServerProcess::start(&[
        "--keys",
        "20000",
        "--seed",
        "3",
        "--leaf-slots",
        "8",
        "--submodel-keys",
        "50",
        "--shm-dir",
        shm.to_str().unwrap(),
    ]);
    // One run per fabric against the same server. A history starts from
    // the bulk load's values, so the second run must not read what the
    // first wrote: tcp runs D (reads loaded keys, inserts fresh ones), shm
    // then runs A (updates loaded keys nobody has updated yet).
    for (fabric, url, workload, op_seed) in [
        ("tcp", server.tcp.clone(), "d", "1"),
        ("shm", server.shm.clone().unwrap(), "a", "2"),
    ] {
        let file = dir.path().join(format!("{fabric}.jsonl"));
        let out = xstore(&[
            "bench",
            "--fabric",
            fabric,
            "--server",
            &url,
            "--keys",
            "20000",
            "--seed",
            "3",
            "--workload",
            workload,
            "--threads",
            "8",
            "--ops",
            "10000",
            "--warmup",
            "0",
            "--op-seed",
            op_seed,
            "--history",
            file.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "bench over {fabric}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let check = xstore(&["check", file.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&check.stdout).to_string();
        println!("{fabric}: {text}");
        assert!(check.status.success(), "{fabric}: {text}");
        assert!(text.starts_with("linearizable: "), "{text}");
    }
    server.stop();
}

#[test]
fn check_reports_a_minimal_violation_and_refuses_garbage() {
    let dir = Scratch::new("history-bad");
    std::fs::create_dir_all(dir.path()).unwrap();
    let bad = dir.path().join("bad.jsonl");
    // Key 1 updated to 11; a read that began after the update was answered
    // still sees 10. Another key is fine and must not be reported.
    std::fs::write(
        &bad,
        r#"{"kind":"init","key":1,"value":10}
{"kind":"init","key":2,"value":20}
{"kind":"op","thread":0,"op":"get","key":2,"inv":0,"res":5,"result":20}
{"kind":"op","thread":0,"op":"update","key":1,"inv":0,"res":10,"value":11,"wrote":true}
{"kind":"op","thread":2,"op":"get","key":1,"inv":11,"res":12,"result":11}
{"kind":"op","thread":1,"op":"get","key":1,"inv":20,"res":30,"result":10}
"#,
    )
    .unwrap();
    let out = xstore(&["check", bad.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.starts_with("NOT linearizable: key 1"), "{text}");
    assert!(text.contains("update 1 0xb -> wrote"), "{text}");
    assert!(text.contains("get 1 -> 0xa"), "{text}");
    assert!(!text.contains("get 2"), "{text}");
    // 2 operations: the update and the stale read.
    assert!(text.contains("sub-history of 2 operations"), "{text}");

    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "{\"kind\":\"op\",\"thread\":0}\n").unwrap();
    let out = xstore(&["check", garbage.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("garbage.jsonl:1"));
    let backwards = dir.path().join("backwards.jsonl");
    std::fs::write(
        &backwards,
        r#"{"kind":"op","thread":0,"op":"get","key":1,"inv":50,"res":10,"result":null}
"#,
    )
    .unwrap();
    let out = xstore(&["check", backwards.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("before invocation"));
}
