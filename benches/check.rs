//! Time to exhaust the B62-15 model (issue "Performance", item 2).
//!
//! Group `check`, function `b62-15`: `models/b62-15.toml` loaded through
//! [`arrival::card::check::load_model`] once, then [`arrival::card::check::run`] (progress off) to
//! exhaustion in each iteration. The throughput is the number of states one run generates
//! (repeats included, as `arrival check` counts them), so criterion's `thrpt` is states per
//! second; the time per iteration is the time to exhaust. One untimed run first prints the
//! checker's own report (states, unique states, depth, seconds, states/s) and checks the
//! verdict.
//!
//! A run takes about ten seconds on two cores, so the group takes ten samples of one run
//! each: about two minutes in all.

use arrival::card::check::{self, CheckOptions};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use std::path::Path;
use std::time::Duration;

fn b62_15(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/b62-15.toml");
    let loaded = check::load_model(&path, None).expect("models/b62-15.toml loads");
    let options = CheckOptions {
        progress: false,
        ..CheckOptions::default()
    };
    let report = check::run(&loaded, &options).expect("the model runs");
    assert!(
        report.as_expected,
        "B62-15: verdict {} (expected {})",
        report.verdict, report.expected
    );
    eprintln!(
        "check b62-15 (threads {}, {:?}): {} states, {} unique, max depth {}, {:.2} s, {:.0} states/s, \
         {:.0} unique/s, verdict {}",
        loaded.file.threads,
        loaded.file.strategy,
        report.states,
        report.unique_states,
        report.max_depth,
        report.seconds,
        report.states_per_second,
        report.unique_states as f64 / report.seconds.max(1e-9),
        report.verdict,
    );

    let mut group = c.benchmark_group("check");
    group
        .throughput(Throughput::Elements(report.states as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs_f64(10.0 * report.seconds));
    group.bench_function("b62-15", |b| {
        b.iter(|| check::run(&loaded, &options).expect("the model runs"));
    });
    group.finish();
}

criterion_group!(benches, b62_15);
criterion_main!(benches);
