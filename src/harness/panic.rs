//! Steps that panic: a panic inside a protocol's step (its decision function, a property
//! check) becomes a finding, the `panic` property, instead of the end of the run. The
//! default panic hook's report on stderr is held back while a step runs, so the message is
//! shown once, in the check's report.

use super::Protocol;
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// The name a panicking step is reported under. Its index is just past the protocol's own
/// properties: `Protocol::PROPERTIES.len()`.
pub const PANIC: &str = "panic";

thread_local! {
    /// Whether this thread is inside [`catching`] (panics are then kept quiet).
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// Where the last quiet panic on this thread happened.
    static PLACE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs, once per process, a hook that keeps panics inside [`catching`] off stderr and
/// hands every other panic to the hook that was there before.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let place = info
                    .location()
                    .map(|at| format!("{}:{}", at.file(), at.line()));
                PLACE.with(|kept| *kept.borrow_mut() = place);
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `work`; a panic comes back as its message and where it happened.
pub fn catching<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let outer = QUIET.with(|quiet| quiet.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(work));
    QUIET.with(|quiet| quiet.set(outer));
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|text| (*text).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        match PLACE.with(|kept| kept.borrow_mut().take()) {
            Some(place) => format!("{message} (at {place})"),
            None => message,
        }
    })
}

/// `protocol.next(world, step)`; a step that panics leads to `world` marked as panicked
/// ([`Protocol::panicked`]).
pub fn next<P: Protocol>(protocol: &P, world: &P::World, step: &P::Step) -> Option<P::World> {
    match catching(|| protocol.next(world, step)) {
        Ok(next) => next,
        Err(_) => Some(protocol.panicked(world)),
    }
}

/// The message of the panic `steps` end in, walked from the initial world (`None` when no
/// step panics: the checker only asks about paths it found panicking).
pub fn message<P: Protocol>(protocol: &P, steps: &[P::Step]) -> Option<String> {
    let mut world = protocol.init();
    for step in steps {
        match catching(|| protocol.next(&world, step)) {
            Ok(Some(next)) => world = next,
            Ok(None) => {}
            Err(message) => return Some(message),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_gives_its_message_and_place_and_the_thread_goes_on() {
        let caught = catching(|| -> u8 { panic!("boom {}", 7) });
        let message = caught.unwrap_err();
        assert!(
            message.starts_with("boom 7 (at src/harness/panic.rs:"),
            "{message}"
        );
        assert_eq!(catching(|| 3), Ok(3));
        let odd = catching(|| -> u8 { std::panic::panic_any(5_u32) }).unwrap_err();
        assert!(odd.starts_with("a panic without a message (at "), "{odd}");
    }

    /// Counts up by one from 0; the step from 3 panics.
    #[derive(Clone, Debug)]
    struct Brittle;

    impl Protocol for Brittle {
        type World = u8;
        type Step = ();
        const PROPERTIES: &'static [&'static str] = &["below-ten"];

        fn init(&self) -> u8 {
            0
        }
        fn steps(&self, world: &u8, steps: &mut Vec<()>) {
            if *world < 9 {
                steps.push(());
            }
        }
        fn next(&self, world: &u8, _: &()) -> Option<u8> {
            assert!(*world != 3, "brittle at {world}");
            Some(world + 1)
        }
        fn violation(world: &u8) -> Option<usize> {
            (*world == u8::MAX).then_some(1)
        }
        fn panicked(&self, _: &u8) -> u8 {
            u8::MAX
        }
        fn checks(&self, _: usize) -> bool {
            true
        }
        fn only(&self, _: usize) -> Self {
            Brittle
        }
        fn describe_step(&self, _: &()) -> String {
            "count".into()
        }
        fn describe_world(&self, world: &u8) -> String {
            world.to_string()
        }
        fn coverage(&self) -> Vec<(&'static str, u64)> {
            Vec::new()
        }
    }

    #[test]
    fn every_engine_finds_a_panicking_step_as_the_panic_property_with_its_message() {
        use crate::harness::explore::{explore, shortest, Engine, Settings, Strategy};
        for engine in [Engine::Arrival, Engine::Stateright] {
            let settings = Settings {
                strategy: Strategy::Bfs,
                threads: 1,
                state_limit: None,
                label: "brittle".into(),
                progress: false,
                engine,
            };
            let run = explore(Brittle, &settings);
            assert_eq!(run.discoveries[PANIC].len(), 4, "{engine:?}");
            assert_eq!(run.unique_states, 5, "{engine:?}");
            let steps = shortest(&Brittle, 1, &settings).expect("a panic");
            assert_eq!(steps.len(), 4);
            let message = message(&Brittle, &steps).expect("the last step panics");
            assert!(message.starts_with("brittle at 3 (at "), "{message}");
        }
    }
}
