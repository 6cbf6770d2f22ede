//! Explorer: serves stateright's Explorer for a [`Protocol`], with every state in domain
//! terms.
//!
//! stateright's Explorer prints a state with `{:#?}` (the initial state, "Complete State"
//! and the `/.states` JSON). A protocol's world derives `Debug` for developers, which shows
//! interned ids rather than card names. So Explorer gets a model of its own,
//! [`ExplorerModel`], whose states ([`Shown`]) carry the protocol along and print
//! [`Protocol::describe_world`]; they hash and compare by the world alone, so fingerprints
//! and the state graph are those of the checker's model, which stays as it is.

use super::{properties, Marked, Protocol};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::TcpListener;
use std::sync::Arc;

/// A world as Explorer sees it: `Debug` describes it in domain terms.
#[derive(Clone)]
pub struct Shown<P: Protocol> {
    /// The world itself.
    pub world: P::World,
    protocol: Arc<P>,
}

impl<P: Protocol> fmt::Debug for Shown<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.protocol.describe_world(&self.world).trim_end())
    }
}

impl<P: Protocol> Hash for Shown<P> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.world.hash(state);
    }
}

impl<P: Protocol> PartialEq for Shown<P> {
    fn eq(&self, other: &Self) -> bool {
        self.world == other.world
    }
}

/// A protocol as a stateright model for Explorer only: the same worlds, steps and
/// properties as [`super::Checked`], its states [`Shown`].
#[derive(Clone, Debug)]
pub struct ExplorerModel<P>(Arc<P>);

impl<P: Protocol> ExplorerModel<P> {
    /// Explorer's model of `protocol`.
    pub fn new(protocol: P) -> Self {
        ExplorerModel(Arc::new(protocol))
    }

    fn show(&self, world: P::World) -> Shown<P> {
        Shown {
            world,
            protocol: Arc::clone(&self.0),
        }
    }
}

impl<P: Protocol> Marked for ExplorerModel<P> {
    fn violation(state: &Shown<P>) -> Option<usize> {
        P::violation(&state.world)
    }
}

impl<P: Protocol> stateright::Model for ExplorerModel<P> {
    type State = Shown<P>;
    type Action = P::Step;

    fn init_states(&self) -> Vec<Shown<P>> {
        vec![self.show(self.0.init())]
    }

    fn actions(&self, state: &Shown<P>, actions: &mut Vec<P::Step>) {
        if P::violation(&state.world).is_none() {
            self.0.steps(&state.world, actions);
        }
    }

    fn next_state(&self, state: &Shown<P>, step: P::Step) -> Option<Shown<P>> {
        super::panic::next(&*self.0, &state.world, &step).map(|world| self.show(world))
    }

    fn format_action(&self, step: &P::Step) -> String {
        self.0.describe_step(step)
    }

    fn format_step(&self, state: &Shown<P>, step: P::Step) -> Option<String> {
        self.next_state(state, step).map(|next| format!("{next:?}"))
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        properties(&*self.0, true)
    }
}

/// Serves stateright's Explorer for `protocol` on `address` with `threads` checker threads
/// (blocks). `listening` runs once the address is known to be free. Fails only when nothing
/// can listen on `address`.
pub fn serve<P: Protocol>(
    protocol: P,
    threads: usize,
    address: &str,
    listening: impl FnOnce(),
) -> std::io::Result<()> {
    use stateright::Model;
    // stateright panics when it cannot listen: find out first, and say why.
    drop(TcpListener::bind(address)?);
    listening();
    ExplorerModel::new(protocol)
        .checker()
        .threads(threads)
        .serve(address);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stateright::{Checker, Model};

    /// A counter that breaks its one property at 2.
    #[derive(Clone, Debug)]
    struct Counter;

    impl Protocol for Counter {
        type World = (u8, Option<usize>);
        type Step = ();
        const PROPERTIES: &'static [&'static str] = &["below two"];

        fn init(&self) -> Self::World {
            (0, None)
        }
        fn steps(&self, _: &Self::World, steps: &mut Vec<()>) {
            steps.push(());
        }
        fn next(&self, world: &Self::World, _: &()) -> Option<Self::World> {
            let n = world.0 + 1;
            Some((n, (n >= 2).then_some(0)))
        }
        fn violation(world: &Self::World) -> Option<usize> {
            world.1
        }
        fn panicked(&self, world: &Self::World) -> Self::World {
            (world.0, Some(1))
        }
        fn checks(&self, _: usize) -> bool {
            true
        }
        fn only(&self, _: usize) -> Self {
            Counter
        }
        fn describe_step(&self, _: &()) -> String {
            "count".into()
        }
        fn describe_world(&self, world: &Self::World) -> String {
            format!("counted {}\n", world.0)
        }
        fn coverage(&self) -> Vec<(&'static str, u64)> {
            Vec::new()
        }
    }

    #[test]
    fn states_print_in_domain_terms_and_fingerprint_as_the_world() {
        let model = ExplorerModel::new(Counter);
        let init = model.init_states().remove(0);
        assert_eq!(format!("{init:#?}"), "counted 0");
        let hash = |value: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            value(&mut hasher);
            hasher.finish()
        };
        assert_eq!(
            hash(&|h| init.hash(h)),
            hash(&|h| init.world.hash(h)),
            "a shown state hashes as its world"
        );
        let next = model.next_state(&init, ()).unwrap();
        assert_eq!(model.format_step(&init, ()).as_deref(), Some("counted 1"));
        assert_ne!(init, next);
    }

    #[test]
    fn explorer_model_finds_what_the_checked_model_finds() {
        let explorer = ExplorerModel::new(Counter).checker().spawn_bfs().join();
        let checked = super::super::Checked(Counter, true)
            .checker()
            .spawn_bfs()
            .join();
        assert_eq!(explorer.unique_state_count(), checked.unique_state_count());
        let path = explorer
            .discovery("below two")
            .expect("found")
            .into_actions();
        assert_eq!(path.len(), 2);
    }
}
