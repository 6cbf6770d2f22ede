//! The CI workflows `docs/ci.md` offers users (`docs/ci/github-actions.yml`,
//! `docs/ci/gitlab-ci.yml`), parsed as YAML and run as their runners would run them: every
//! job in order, a matrix or `parallel` job once per index with the runner's variables set,
//! each job in a fresh scratch checkout of its own, every `run:` / `script:` line through
//! bash with `arrival` on PATH. Files pass between jobs only as the workflow declares them:
//! what an upload step (`path`) or a job's `artifacts` (`paths`, `reports`) names is kept
//! under the artifact's name, and a download step (`pattern`) or a `needs: artifacts: true`
//! brings it into the next job's checkout.
//!
//! Two things differ from a real runner, both on purpose. The install line is not executed
//! (it would build arrival a second time); the test asserts its text instead, and puts the
//! binary cargo built for the tests on PATH. The scratch checkout holds every fixture but
//! only a few model files, so `models/*.toml` means three models here, not every model
//! (`.ci/test` checks all of them already).

use crate::util::{root, TempDir, ARRIVAL};
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

/// The install line both workflows must use: from a clone of this repository.
const INSTALL: &str = "cargo install --path . --locked";

/// The model files the scratch checkout gets: a card model, a card mutant and a facts model.
const MODELS: [&str; 3] = [
    "b62-15.toml",
    "mutant-last-arrival-wins.toml",
    "acmeflow-wf14.toml",
];

fn load(path: &str) -> Yaml {
    let text = std::fs::read_to_string(root().join(path)).expect("the workflow file exists");
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|error| panic!("{path} is not YAML: {error}"));
    assert_eq!(docs.len(), 1, "{path} holds one document");
    docs.remove(0)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("a folder");
    for entry in std::fs::read_dir(from).expect("readable") {
        let entry = entry.expect("readable");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copied");
        }
    }
}

/// A scratch checkout: every fixture, a few model files.
fn checkout() -> TempDir {
    let dir = TempDir::new().expect("a temporary folder");
    copy_dir(&root().join("fixtures"), &dir.path().join("fixtures"));
    std::fs::create_dir(dir.path().join("models")).expect("a folder");
    for model in MODELS {
        std::fs::copy(
            root().join("models").join(model),
            dir.path().join("models").join(model),
        )
        .expect("copied");
    }
    dir
}

/// Runs one script line as a runner would (bash, stop at the first failing command).
fn run(line: &str, dir: &Path, env: &[(String, String)], what: &str) {
    if line.trim_start().starts_with("cargo install") {
        assert_eq!(line.trim(), INSTALL, "{what}: the install line");
        return;
    }
    let bin_dir = PathBuf::from(ARRIVAL)
        .parent()
        .expect("a folder")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .args(["-eo", "pipefail", "-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "{what}: `{line}` exited {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn text(yaml: &Yaml) -> Option<&str> {
    yaml.as_str()
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (index, part) in parts.iter().enumerate() {
        if index == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Copies the files of `from` whose names match `pattern` into `to`; returns how many.
fn copy_matching(from: &Path, pattern: &str, to: &Path) -> usize {
    std::fs::create_dir_all(to).expect("a folder");
    let mut copied = 0;
    for entry in std::fs::read_dir(from).expect("readable") {
        let name = entry.expect("readable").file_name();
        let name = name.to_string_lossy();
        if matches(pattern, &name) {
            std::fs::copy(from.join(&*name), to.join(&*name)).expect("copied");
            copied += 1;
        }
    }
    copied
}

/// The artifacts kept so far, one folder per artifact name.
struct Artifacts(TempDir);

impl Artifacts {
    fn new() -> Artifacts {
        Artifacts(TempDir::new().expect("a temporary folder"))
    }

    /// Keeps what `pattern` names in the job's checkout, under `name`.
    fn upload(&self, name: &str, job: &Path, pattern: &str) {
        copy_matching(job, pattern, &self.0.path().join(name));
    }

    /// Brings every artifact whose name matches `pattern` into the job's checkout.
    fn download(&self, pattern: &str, job: &Path) {
        for entry in std::fs::read_dir(self.0.path()).expect("readable") {
            let entry = entry.expect("readable");
            if matches(pattern, &entry.file_name().to_string_lossy()) {
                copy_matching(&entry.path(), "*", job);
            }
        }
    }

    /// The folder of one artifact.
    fn get(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// What the workflows uploaded: every job's JUnit (`junit`: the folder of each file) and
/// both shards' reports (`shards`).
fn assert_reports(junit: &[(&str, PathBuf)], shards: &[PathBuf]) {
    for (file, dir) in junit {
        let xml = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|_| panic!("{file} was uploaded"));
        assert!(xml.contains("<testsuites"), "{file} is JUnit XML");
        // A property a mutant's model expects to break is a failed case; every model's
        // verdict case (and every sweep policy's) must pass.
        for case in xml.split("<testcase ").skip(1) {
            let case = case.split("</testcase>").next().unwrap_or(case);
            let judged = case.starts_with("name=\"verdict\"") || *file == "arrival-sweep.xml";
            assert!(!(judged && case.contains("<failure")), "{file}: {case}");
        }
    }
    for (index, dir) in shards.iter().enumerate() {
        let shard = format!("shard-{}.json", index + 1);
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(&shard)).expect("a shard report"))
                .expect("JSON");
        assert_eq!(report["models"][0]["verdict"], "partial", "{shard}");
    }
}

#[test]
fn the_github_actions_workflow_runs_job_by_job_as_written() {
    let workflow = load("docs/ci/github-actions.yml");
    let artifacts = Artifacts::new();
    let jobs = workflow["jobs"].as_hash().expect("jobs");
    let names: Vec<&str> = jobs.keys().filter_map(text).collect();
    assert_eq!(names, ["models", "shard", "merge"]);
    for (name, job) in jobs {
        let name = text(name).expect("a job name");
        let indices: Vec<String> = match job["strategy"]["matrix"]["shard"].as_vec() {
            Some(values) => values
                .iter()
                .map(|value| value.as_i64().expect("a shard number").to_string())
                .collect(),
            None => vec![String::new()],
        };
        for index in &indices {
            let matrix = |value: &str| value.replace("${{ matrix.shard }}", index);
            let dir = checkout();
            let mut env = Vec::new();
            if let Some(vars) = job["env"].as_hash() {
                for (key, value) in vars {
                    let value = matrix(text(value).expect("a string"));
                    env.push((text(key).expect("a name").to_string(), value));
                }
            }
            for step in job["steps"].as_vec().expect("steps") {
                if let Some(line) = text(&step["run"]) {
                    run(
                        line,
                        dir.path(),
                        &env,
                        &format!("github job {name} {index}"),
                    );
                    continue;
                }
                let uses = text(&step["uses"]).expect("a step runs or uses an action");
                let with = &step["with"];
                match uses {
                    "actions/checkout@v4" | "Swatinem/rust-cache@v2" => {}
                    "actions/upload-artifact@v4" => {
                        let artifact = matrix(text(&with["name"]).expect("a name"));
                        artifacts.upload(
                            &artifact,
                            dir.path(),
                            text(&with["path"]).expect("a path"),
                        );
                    }
                    "actions/download-artifact@v4" => {
                        assert_eq!(with["merge-multiple"].as_bool(), Some(true));
                        artifacts.download(text(&with["pattern"]).expect("a pattern"), dir.path());
                    }
                    other => {
                        panic!("github job {name}: an action this test does not know: {other}")
                    }
                }
            }
        }
    }
    assert_reports(
        &[
            ("arrival-models.xml", artifacts.get("junit-models")),
            ("arrival-sweep.xml", artifacts.get("junit-models")),
            ("arrival-merged.xml", artifacts.get("junit-merged")),
        ],
        &[artifacts.get("shard-1"), artifacts.get("shard-2")],
    );
}

/// The files a GitLab job keeps: `artifacts.paths` and `artifacts.reports.junit`.
fn gitlab_artifacts(job: &Yaml) -> Vec<&str> {
    let artifacts = &job["artifacts"];
    let mut patterns: Vec<&str> = artifacts["paths"]
        .as_vec()
        .map(|paths| paths.iter().filter_map(text).collect())
        .unwrap_or_default();
    patterns.extend(text(&artifacts["reports"]["junit"]));
    patterns
}

#[test]
fn the_gitlab_ci_jobs_run_stage_by_stage_as_written() {
    let pipeline = load("docs/ci/gitlab-ci.yml");
    let artifacts = Artifacts::new();
    let before: Vec<&str> = pipeline["default"]["before_script"]
        .as_vec()
        .expect("a before_script")
        .iter()
        .filter_map(text)
        .collect();
    let stages: Vec<&str> = pipeline["stages"]
        .as_vec()
        .expect("stages")
        .iter()
        .filter_map(text)
        .collect();
    assert_eq!(stages, ["check", "merge"]);
    let jobs = pipeline.as_hash().expect("a mapping");
    let mut ran = Vec::new();
    for stage in stages {
        for (name, job) in jobs {
            let name = text(name).expect("a key");
            if text(&job["stage"]) != Some(stage) {
                continue;
            }
            let total = job["parallel"].as_i64().unwrap_or(0);
            let indices: Vec<i64> = if total > 0 {
                (1..=total).collect()
            } else {
                vec![0]
            };
            for index in indices {
                let dir = checkout();
                // A job's `needs` with `artifacts: true` brings those jobs' artifacts.
                for need in job["needs"].as_vec().into_iter().flatten() {
                    if need["artifacts"].as_bool() == Some(true) {
                        let from = text(&need["job"]).expect("a job");
                        artifacts.download(&format!("{from}-*"), dir.path());
                    }
                }
                let env = if total > 0 {
                    vec![
                        ("CI_NODE_INDEX".to_string(), index.to_string()),
                        ("CI_NODE_TOTAL".to_string(), total.to_string()),
                    ]
                } else {
                    Vec::new()
                };
                let script = job["script"].as_vec().expect("a script");
                for line in before.iter().copied().chain(script.iter().filter_map(text)) {
                    run(
                        line,
                        dir.path(),
                        &env,
                        &format!("gitlab job {name} {index}"),
                    );
                }
                for pattern in gitlab_artifacts(job) {
                    artifacts.upload(&format!("{name}-{index}"), dir.path(), pattern);
                }
            }
            ran.push(name);
        }
    }
    assert_eq!(ran, ["models", "shard", "merge"]);
    assert_reports(
        &[
            ("arrival-models.xml", artifacts.get("models-0")),
            ("arrival-sweep.xml", artifacts.get("models-0")),
            ("arrival-merged.xml", artifacts.get("merge-0")),
        ],
        &[artifacts.get("shard-1"), artifacts.get("shard-2")],
    );
}

#[test]
fn docs_ci_md_shows_each_workflow_file_as_it_is() {
    let page = std::fs::read_to_string(root().join("docs/ci.md")).expect("docs/ci.md");
    for file in ["docs/ci/github-actions.yml", "docs/ci/gitlab-ci.yml"] {
        let text = std::fs::read_to_string(root().join(file)).expect("the workflow file");
        assert!(page.contains(&text), "docs/ci.md shows {file} as it is");
    }
}
