//! The repository's hardware profiles parse, agree with their files, and
//! bad profiles are typed errors.

use rdmasim::{Profile, ProfileError};

fn profiles_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles")
}

#[test]
fn builtins_are_the_files_in_profiles_dir() {
    let names = Profile::builtin_names();
    assert!(names.len() >= 3);
    let mut files: Vec<String> = std::fs::read_dir(profiles_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .map(|n| n.trim_end_matches(".toml").to_string())
        .collect();
    files.sort();
    let mut sorted: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(files, sorted, "every profiles/*.toml is a builtin and back");
    for name in names {
        let builtin = Profile::builtin(name).unwrap();
        assert_eq!(builtin.name, name);
        let path = profiles_dir().join(format!("{name}.toml"));
        assert_eq!(Profile::load(&path).unwrap(), builtin);
        assert_eq!(Profile::resolve(path.to_str().unwrap()).unwrap(), builtin);
        assert_eq!(Profile::resolve(name).unwrap(), builtin);
    }
}

#[test]
fn every_profile_parameter_has_a_source_comment() {
    // Each `key = value` line must sit under a comment (its source): a
    // comment covers the keys that follow it up to the next blank line, so
    // one source can cover a group (read/write/send from one datasheet
    // figure).
    for name in Profile::builtin_names() {
        let text = std::fs::read_to_string(profiles_dir().join(format!("{name}.toml"))).unwrap();
        let mut commented = false;
        let mut keys = 0;
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('#') {
                commented = true;
            } else if l.is_empty() {
                commented = false;
            } else if l.starts_with('[') {
                // A table header neither is nor ends a source comment.
            } else if let Some((key, _)) = l.split_once('=') {
                keys += 1;
                let key = key.trim();
                if key != "name" && key != "description" {
                    assert!(commented, "{name}: `{l}` has no source comment above it");
                }
            }
        }
        assert!(keys > 20, "{name}: only {keys} keys");
    }
}

#[test]
fn bad_profiles_are_typed_errors() {
    let good = std::fs::read_to_string(profiles_dir().join("cx4-100g.toml")).unwrap();
    assert!(matches!(
        Profile::from_toml_str(&good.replace("link_gbps = 100.0", "link_gbps = -1.0")),
        Err(ProfileError::OutOfRange {
            field: "rnic.link_gbps",
            ..
        })
    ));
    assert!(matches!(
        Profile::from_toml_str(&good.replace("rnics = 2", "rnics = 0")),
        Err(ProfileError::OutOfRange {
            field: "machine.rnics",
            ..
        })
    ));
    assert!(matches!(
        Profile::from_toml_str(&good.replace("[machine]", "[machine]\nsurprise = 1")),
        Err(ProfileError::Parse(_))
    ));
    assert!(matches!(
        Profile::from_toml_str("name = \"x\""),
        Err(ProfileError::Parse(_))
    ));
    assert!(matches!(
        Profile::builtin("cx9"),
        Err(ProfileError::UnknownBuiltin { .. })
    ));
    assert!(matches!(
        Profile::load("/nonexistent/p.toml"),
        Err(ProfileError::Io { .. })
    ));
}
