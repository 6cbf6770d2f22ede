//! `check --shard K/N`, `report merge` and `check --simulate N`, run as a user runs them:
//! four shards merged give the verdict and violated properties of one unsharded run (by
//! parts for a split model, by first steps otherwise, card and facts models); simulation
//! finds an easy mutant's violation with a fixed seed and never says `pass`; bad input exits
//! 2 with a message.

use crate::util::{arrival, status, stderr};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn model_json(output: &Output) -> Value {
    let document: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(output)
        )
    });
    document["models"][0].clone()
}

fn violated(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = report["violated"]
        .as_array()
        .expect("violated is a list")
        .iter()
        .map(|name| name.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// The `always` properties' statuses, by name.
fn statuses(report: &Value) -> Vec<(String, String)> {
    report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|property| property["kind"] == "always")
        .map(|property| {
            (
                property["name"].as_str().unwrap().to_owned(),
                property["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Runs `check` on `model` (with `extra` arguments) whole, then as `count` shards written to
/// `dir` and merged; returns (whole, merged, shard reports).
fn whole_and_merged(
    dir: &Path,
    model: &str,
    extra: &[&str],
    count: usize,
) -> (Value, Value, Vec<Value>) {
    let mut args = vec!["check", model, "--quiet", "--json"];
    args.extend_from_slice(extra);
    let whole = arrival(&args);
    assert!(status(&whole) < 2, "{}", stderr(&whole));
    let whole = model_json(&whole);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut shards = Vec::new();
    for index in 1..=count {
        let spec = format!("{index}/{count}");
        let mut args = args.clone();
        args.extend(["--shard", spec.as_str()]);
        let output = arrival(&args);
        assert!(status(&output) < 2, "{}", stderr(&output));
        let file = dir.join(format!("shard-{index}.json"));
        std::fs::write(&file, &output.stdout).unwrap();
        files.push(file);
        shards.push(model_json(&output));
    }
    let mut merge: Vec<String> = vec!["report".into(), "merge".into(), "--json".into()];
    merge.extend(files.iter().map(|file| file.display().to_string()));
    let merge: Vec<&str> = merge.iter().map(String::as_str).collect();
    let merged = arrival(&merge);
    assert!(status(&merged) < 2, "{}", stderr(&merged));
    (whole, model_json(&merged), shards)
}

/// Each violated property's counterexample length, by name.
fn trace_lengths(report: &Value) -> Vec<(String, usize)> {
    report["properties"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|property| property["status"] == "violated")
        .map(|property| {
            (
                property["name"].as_str().unwrap().to_owned(),
                property["trace"]["steps"].as_array().map_or(0, Vec::len),
            )
        })
        .collect()
}

fn assert_same_verdict(whole: &Value, merged: &Value, what: &str) {
    assert_eq!(merged["verdict"], whole["verdict"], "{what}: verdict");
    assert_eq!(violated(merged), violated(whole), "{what}: violated");
    assert_eq!(statuses(merged), statuses(whole), "{what}: statuses");
    // The merged counterexamples are as short as one run's (shortest ones, whichever
    // shard found them).
    assert_eq!(
        trace_lengths(merged),
        trace_lengths(whole),
        "{what}: trace lengths"
    );
    assert_eq!(merged["as_expected"], whole["as_expected"], "{what}");
    assert_eq!(merged["merged"]["missing"], serde_json::json!([]), "{what}");
}

#[test]
fn four_shards_of_a_passing_model_merge_to_its_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, merged, shards) =
        whole_and_merged(dir.path(), "models/conflicted-first-record.toml", &[], 4);
    assert_eq!(whole["verdict"], "pass");
    assert_same_verdict(&whole, &merged, "conflicted-first-record");
    for shard in &shards {
        assert_eq!(shard["shard"]["by"], "first-steps");
        assert_ne!(shard["verdict"], "pass", "a shard of four never says pass");
    }
}

#[test]
fn four_shards_of_b62_15_by_owner_overlap_by_the_pinned_amount() {
    // B62-15 has parts that commute (card-7, card-8, card-99), so it is sharded by owner:
    // a world is shared while none of card-7's deliveries is recorded, and otherwise its
    // owner is which of the others' are. Pinned: 8 owners, 2 per shard, 61 shared worlds;
    // the shards' unique states sum to 4,112 against one run's 4,031 (1.02x; by first steps
    // with sleep sets it was 10,536, 2.61x).
    let dir = tempfile::tempdir().unwrap();
    let (whole, merged, shards) = whole_and_merged(dir.path(), "models/b62-15.toml", &[], 4);
    assert_eq!(whole["verdict"], "pass");
    assert_eq!(whole["unique_states"], 4_031);
    assert_same_verdict(&whole, &merged, "b62-15");
    let unique: Vec<u64> = shards
        .iter()
        .map(|shard| {
            assert_eq!(shard["shard"]["by"], "owners");
            assert_eq!(shard["shard"]["owners"], 8);
            assert_eq!(shard["shard"]["owners_taken"], 2);
            assert_eq!(shard["shard"]["shared_states"], 61);
            shard["unique_states"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(unique, vec![885, 599, 1_457, 1_171]);
}

#[test]
fn a_split_model_shards_by_parts() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, merged, shards) = whole_and_merged(dir.path(), "models/b62-15-split.toml", &[], 4);
    assert_eq!(whole["verdict"], "pass");
    assert_eq!(whole["parts"], 3);
    assert_same_verdict(&whole, &merged, "b62-15-split");
    let parts: Vec<Value> = shards
        .iter()
        .map(|shard| {
            assert_eq!(shard["shard"]["by"], "parts");
            shard["shard"]["parts"].clone()
        })
        .collect();
    assert_eq!(
        parts,
        vec![
            serde_json::json!([0]),
            serde_json::json!([1]),
            serde_json::json!([2]),
            serde_json::json!([])
        ]
    );
    // Parts share nothing: the shards' states add up to the whole run's.
    let sum: u64 = shards
        .iter()
        .map(|shard| shard["unique_states"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, whole["unique_states"].as_u64().unwrap());
}

#[test]
fn four_shards_of_mutants_merge_to_the_same_violations() {
    for (model, extra) in [
        ("models/mutant-ignore-pause.toml", &[][..]),
        ("models/mutant-id-only-dedupe.toml", &[][..]),
        ("models/acmeflow-mutant-ack-before-commit.toml", &[][..]),
        // Two properties broken at once.
        ("models/mutant-last-arrival-wins.toml", &[][..]),
        // Under another policy than the file's.
        (
            "models/conflicted-first-record.toml",
            &["--policy", "reevaluate-conflicted-first"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (whole, merged, _) = whole_and_merged(dir.path(), model, extra, 4);
        assert_eq!(whole["verdict"], "fail", "{model}");
        assert_same_verdict(&whole, &merged, model);
        // The merged counterexample is a shortest one found by a shard, replayable as usual.
        for property in merged["properties"].as_array().unwrap() {
            if property["status"] == "violated" {
                assert!(property["trace"]["steps"].as_array().is_some(), "{model}");
            }
        }
    }
}

#[test]
fn merge_names_missing_shards_and_the_verdict_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for index in [1, 3] {
        let spec = format!("{index}/4");
        let output = arrival(&[
            "check",
            "models/conflicted-first-record.toml",
            "--quiet",
            "--json",
            "--shard",
            &spec,
        ]);
        assert_eq!(status(&output), 0, "{}", stderr(&output));
        let file = dir.path().join(format!("s{index}.json"));
        std::fs::write(&file, &output.stdout).unwrap();
        files.push(file.display().to_string());
    }
    let junit = dir.path().join("merged.xml");
    let output = arrival(&[
        "report",
        "merge",
        &files[0],
        &files[1],
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(status(&output), 1, "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("MISSING shards [2, 4]"), "{text}");
    assert!(text.contains("incomplete"), "{text}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("a shard is missing"), "{xml}");
}

#[test]
fn merge_refuses_what_cannot_be_merged() {
    let dir = tempfile::tempdir().unwrap();
    // Shard `spec` of `model` (with `extra` arguments), written to `name` in the folder.
    let shard = |model: &str, spec: &str, name: &str, extra: &[&str]| -> String {
        let mut args = vec!["check", model, "--quiet", "--json", "--shard", spec];
        args.extend_from_slice(extra);
        let output = arrival(&args);
        assert!(status(&output) < 2, "{}", stderr(&output));
        let file = dir.path().join(name);
        std::fs::write(&file, &output.stdout).unwrap();
        file.display().to_string()
    };
    let a1 = shard("models/conflicted-first-record.toml", "1/2", "a1.json", &[]);
    let a2 = shard("models/conflicted-first-record.toml", "2/2", "a2.json", &[]);
    let b2 = shard("models/re-pause.toml", "2/2", "b2.json", &[]);
    let a2of3 = shard(
        "models/conflicted-first-record.toml",
        "2/3",
        "a2of3.json",
        &[],
    );
    let whole = dir.path().join("whole.json");
    let output = arrival(&[
        "check",
        "models/conflicted-first-record.toml",
        "--quiet",
        "--json",
    ]);
    std::fs::write(&whole, &output.stdout).unwrap();
    let whole = whole.display().to_string();
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"models\": [").unwrap();
    let broken = broken.display().to_string();
    for (files, words) in [
        (vec![&a1, &b2], vec!["b2.json", "re-pause", "same models"]),
        (
            vec![&a1, &a1],
            vec!["a1.json", "shard 1/2", "each shard once"],
        ),
        (vec![&a1, &a2of3], vec!["a2of3.json", "shard count"]),
        (vec![&a1, &whole], vec!["whole.json", "not a shard report"]),
        (vec![&a1, &broken], vec!["broken.json", "truncated"]),
    ] {
        let mut args = vec!["report", "merge"];
        args.extend(files.iter().map(|file| file.as_str()));
        let output = arrival(&args);
        assert_eq!(status(&output), 2, "{files:?}: {}", stderr(&output));
        for word in words {
            assert!(
                stderr(&output).contains(word),
                "{word}: {}",
                stderr(&output)
            );
        }
    }
    let output = arrival(&["report", "merge", &a2, &a1]);
    assert_eq!(status(&output), 0, "{}", stderr(&output));
    // A policy given to one shard only is another check.
    let other = shard(
        "models/conflicted-first-record.toml",
        "2/2",
        "other.json",
        &["--policy", "last-arrival-wins"],
    );
    let output = arrival(&["report", "merge", &a1, &other]);
    assert_eq!(status(&output), 2);
    assert!(stderr(&output).contains("policy"), "{}", stderr(&output));
    // Shards by parts under different fault budgets are shares of two state spaces: the
    // parts and the shard count agree, only the settings tell them apart.
    let split = |spec: &str, budgets: &str, name: &str| -> String {
        shard(
            "models/b62-15-split.toml",
            spec,
            name,
            &["--budgets", budgets],
        )
    };
    let one = split("1/2", "1,1,1,0", "split-1.json");
    let two = split("2/2", "1,1,1,0", "split-2.json");
    let fewer = split("2/2", "0,1,1,0", "split-2-fewer.json");
    let output = arrival(&["report", "merge", &one, &two]);
    assert_eq!(status(&output), 0, "{}", stderr(&output));
    let output = arrival(&["report", "merge", &one, &fewer]);
    assert_eq!(status(&output), 2, "{}", stderr(&output));
    for word in [
        "split-2-fewer.json",
        "settings",
        "duplicates=0",
        "duplicates=1",
    ] {
        assert!(
            stderr(&output).contains(word),
            "{word}: {}",
            stderr(&output)
        );
    }
    // Reports from before `settings` existed cannot show they share a state space.
    let old = |from: &str, name: &str| -> String {
        let mut report: Value =
            serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
        report["models"][0]
            .as_object_mut()
            .unwrap()
            .remove("settings");
        let file = dir.path().join(name);
        std::fs::write(&file, report.to_string()).unwrap();
        file.display().to_string()
    };
    let (old_one, old_two) = (old(&one, "old-1.json"), old(&two, "old-2.json"));
    let output = arrival(&["report", "merge", &old_one, &old_two]);
    assert_eq!(status(&output), 2, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("old-1.json")
            && stderr(&output).contains("before reports carried"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn bad_shards_exit_2_with_a_message() {
    for (spec, words) in [
        ("5/4", "from 1 to 4"),
        ("0/4", "from 1 to 4"),
        ("x", "K/N"),
        ("1/0", "at least 1"),
    ] {
        let output = arrival(&["check", "models/re-pause.toml", "--shard", spec]);
        assert_eq!(status(&output), 2, "{spec}");
        assert!(
            stderr(&output).contains(words),
            "{spec}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{spec}");
    }
    let output = arrival(&[
        "check",
        "models/re-pause.toml",
        "--shard",
        "1/2",
        "--simulate",
        "5",
    ]);
    assert_eq!(status(&output), 2);
    let output = arrival(&["check", "models/re-pause.toml", "--simulate", "0"]);
    assert_eq!(status(&output), 2);
}

#[test]
fn simulation_finds_an_easy_mutant_with_a_seed_and_walks_it_again() {
    let run = |walks: &str| {
        let output = arrival(&[
            "check",
            "models/mutant-ignore-pause.toml",
            "--quiet",
            "--json",
            "--simulate",
            walks,
            "--seed",
            "42",
        ]);
        assert_eq!(status(&output), 0, "{}", stderr(&output));
        model_json(&output)
    };
    let report = run("500");
    assert_eq!(report["verdict"], "fail");
    assert_eq!(violated(&report), vec!["paused-frozen".to_owned()]);
    let simulation = &report["simulation"];
    assert_eq!(simulation["seed"], 42);
    let found = &simulation["violations"][0];
    assert_eq!(found["property"], "paused-frozen");
    let walk = found["walk"].as_u64().unwrap();
    // The same seed walks the same walks; walk+1 walks reach it again.
    let again = run(&(walk + 1).to_string());
    assert_eq!(again["simulation"]["violations"][0]["walk"], walk);
    assert_eq!(
        again["simulation"]["violations"][0]["walked"],
        found["walked"]
    );
    // Text output says how to walk it again and that nothing is proved.
    let output = arrival(&[
        "check",
        "models/mutant-ignore-pause.toml",
        "--quiet",
        "--simulate",
        "500",
        "--seed",
        "42",
    ]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!("--simulate {} --seed 42", walk + 1)),
        "{text}"
    );
    assert!(text.contains("proves nothing"), "{text}");
}

#[test]
fn simulation_of_spec_is_sampled_never_pass() {
    for model in ["models/b62-15.toml", "models/acmeflow-wf14.toml"] {
        let dir = tempfile::tempdir().unwrap();
        let junit = dir.path().join("sim.xml");
        let output = arrival(&[
            "check",
            model,
            "--quiet",
            "--json",
            "--simulate",
            "200",
            "--seed",
            "3",
            "--junit",
            junit.to_str().unwrap(),
        ]);
        assert_eq!(status(&output), 0, "{model}: {}", stderr(&output));
        let report = model_json(&output);
        assert_eq!(report["verdict"], "sampled", "{model}");
        assert!(violated(&report).is_empty(), "{model}");
        assert!(report["simulation"]["steps"].as_u64().unwrap() > 0);
        // Only the card precondition, checked on the fixture before any walk, holds.
        for (name, status) in statuses(&report) {
            assert!(
                status != "holds" || name == "authority-current",
                "{model}: {name} {status}"
            );
        }
        let xml = std::fs::read_to_string(&junit).unwrap();
        assert!(xml.contains("proves nothing"), "{xml}");
    }
    // A mutant whose violation no walk finds is not as expected: exit 1.
    let output = arrival(&[
        "check",
        "models/mutant-ignore-pause.toml",
        "--quiet",
        "--simulate",
        "1",
        "--max-depth",
        "1",
    ]);
    assert_eq!(status(&output), 1, "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("sampled"));
}
