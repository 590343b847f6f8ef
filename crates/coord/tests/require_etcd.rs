//! A missing `etcd` skips the tests that need one with one line, unless
//! `XSTORE_REQUIRE_ETCD=1` (CI), which makes it a failure. Checked by
//! running this test binary again as a child with no etcd to find.

use std::process::Command;

/// Set in the child: it only asks for etcd and reports.
const PROBE: &str = "XSTORE_TEST_ETCD_PROBE";

fn child(require: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([
        "--exact",
        "a_missing_etcd_skips_unless_required",
        "--nocapture",
    ])
    .env(PROBE, "1")
    .env("PATH", "/nonexistent")
    .env_remove("XSTORE_ETCD")
    .env_remove("XSTORE_REQUIRE_ETCD");
    if let Some(v) = require {
        cmd.env("XSTORE_REQUIRE_ETCD", v);
    }
    cmd.output().expect("run the test binary")
}

#[test]
fn a_missing_etcd_skips_unless_required() {
    if std::env::var_os(PROBE).is_some() {
        assert!(coord::etcd_for_test().is_none(), "no etcd on this PATH");
        return;
    }
    for require in [None, Some("0")] {
        let out = child(require);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "skips with {require:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("skipped:")).collect();
        assert_eq!(lines.len(), 1, "one skip line: {err}");
        assert!(
            lines[0].contains("etcd-server"),
            "says what to install: {}",
            lines[0]
        );
    }
    let out = child(Some("1"));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "XSTORE_REQUIRE_ETCD=1 fails: {all}");
    assert!(
        all.contains("XSTORE_REQUIRE_ETCD=1 but no etcd binary"),
        "{all}"
    );
}
