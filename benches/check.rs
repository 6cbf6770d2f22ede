//! Time to exhaust the B62-15 model with each checker, in one run.
//!
//! Group `check`: `models/b62-15.toml` (DFS, 2 threads, as the file says) loaded once, then
//! [`arrival::card::check::run`] (progress off) to exhaustion in each iteration:
//! - `b62-15/arrival`: arrival's own checker, with the model file's defaults (the symmetry
//!   of identical redeliveries, settled decisions and paused paths merged, sleep sets);
//! - `b62-15/arrival-no-sleep-sets`: the same with `sleep_sets = false`: the same states
//!   through more transitions, the figure before sleep sets;
//! - `b62-15/arrival-unmerged`: the same checker with `merge_settled = false` (which turns
//!   `merge_paused` off too), the model as it was before those reductions;
//! - `b62-15/stateright`: stateright 0.31's checker on the default model, the figure before
//!   arrival had its own checker.
//!
//! The throughput is the number of distinct states one run finds, so criterion's `thrpt`
//! is unique states per second (the merged model has fewer states, each costing more
//! transitions: compare times as well as rates). One untimed run of each first prints the
//! checker's own report (states, unique states, depth, seconds) and checks the verdict;
//! the two checkers must reach the same states.
//!
//! The binary uses mimalloc, as `arrival` does. A run takes a fraction of a second to two
//! seconds on two cores; ten samples of each: under a minute in all.

use arrival::card::check::{self, CheckOptions, Engine};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use std::path::Path;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn b62_15(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/b62-15.toml");
    let mut merged = check::load_model(&path, None).expect("models/b62-15.toml loads");
    // Both engines over one state space: stateright's checkers do not take redeliveries
    // alone, so the bench turns that reduction off (with it, arrival's run counts 4,031
    // unique states against 21,695).
    merged.file.eager_redeliveries = false;
    let mut awake = merged.clone();
    awake.file.sleep_sets = false;
    let mut unmerged = merged.clone();
    unmerged.file.merge_settled = false;
    let mut group = c.benchmark_group("check");
    let mut unique = None;
    for (name, engine, loaded) in [
        ("arrival", Engine::Arrival, &merged),
        ("arrival-no-sleep-sets", Engine::Arrival, &awake),
        ("arrival-unmerged", Engine::Arrival, &unmerged),
        ("stateright", Engine::Stateright, &merged),
    ] {
        let options = CheckOptions {
            progress: false,
            engine,
            ..CheckOptions::default()
        };
        let report = check::run(loaded, &options).expect("the model runs");
        assert!(
            report.as_expected,
            "B62-15 ({name}): verdict {} (expected {})",
            report.verdict, report.expected
        );
        if loaded.file.merge_settled {
            assert_eq!(
                *unique.get_or_insert(report.unique_states),
                report.unique_states,
                "both checkers reach the same states"
            );
        }
        eprintln!(
            "check b62-15 with {name} (threads {}, {:?}): {} states, {} unique, max depth {}, \
             {:.2} s, {:.0} unique/s, verdict {}",
            loaded.file.threads,
            loaded.file.strategy,
            report.states,
            report.unique_states,
            report.max_depth,
            report.seconds,
            report.unique_states as f64 / report.seconds.max(1e-9),
            report.verdict,
        );
        group
            .throughput(Throughput::Elements(report.unique_states as u64))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs_f64(10.0 * report.seconds));
        group.bench_function(format!("b62-15/{name}"), |b| {
            b.iter(|| check::run(loaded, &options).expect("the model runs"));
        });
    }
    group.finish();
}

criterion_group!(benches, b62_15);
criterion_main!(benches);
