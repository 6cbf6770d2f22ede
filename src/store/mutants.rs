//! Deliberately broken stores, which the drills must catch. Each is a small wrapper around
//! the production store's own steps (load, decide, write cards, write records) that puts
//! one boundary in the wrong place; the production path ([`Store::deliver_batch`]) has no
//! mutant in it.

use crate::store::{
    decide, deliver_batch_in, load_for_batch, Acknowledgement, Database, DbError, Incoming,
    Isolation, Store, StoreError,
};
use std::time::Duration;

/// A deliberately broken store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMutant {
    /// Writes the acknowledgement before the transaction commits.
    AckBeforeCommit,
    /// Commits the card (and its counters) in one transaction and the identity record,
    /// holds and audit in a second one.
    TwoTransactions,
    /// Reads what the decision needs before the transaction starts, so nothing stops
    /// another receiver from changing it in between (a lost update).
    NoLock,
}

impl StoreMutant {
    /// Every store mutant.
    pub const ALL: [StoreMutant; 3] = [
        StoreMutant::AckBeforeCommit,
        StoreMutant::TwoTransactions,
        StoreMutant::NoLock,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StoreMutant::AckBeforeCommit => "ack-before-commit",
            StoreMutant::TwoTransactions => "two-transactions",
            StoreMutant::NoLock => "no-lock",
        }
    }
}

impl std::str::FromStr for StoreMutant {
    type Err = String;

    fn from_str(text: &str) -> Result<StoreMutant, String> {
        StoreMutant::ALL
            .into_iter()
            .find(|mutant| mutant.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown store mutant `{text}`: one of ack-before-commit, two-transactions, no-lock"
                )
            })
    }
}

/// How long `ack-before-commit` waits between handing out the acknowledgements and
/// sending `COMMIT`. A PostgreSQL server commits what a killed client has already sent, so
/// without it the mutant's window is the few microseconds between its `write` to standard
/// output and its `write` to the socket, which a kill from another process almost never
/// hits. The pause stands for whatever may come between the two in a real receiver (a
/// network hop to the sender, a scheduler delay); it is the mutant's, not the store's.
/// At 2 ms, `arrival conform`'s kill right after the acknowledgement came too late once in
/// a CI run on a loaded machine (reproduced 2/3); 20 ms leaves the kill room.
pub const ACK_TO_COMMIT: Duration = Duration::from_millis(20);

/// How long `two-transactions` waits between its two commits. Without it the window
/// between them is one `BEGIN` and a few inserts, well under a millisecond, and a kill
/// timed from another process lands there only by luck (the crash drill needed up to 200
/// kills, `arrival conform` reproduced it 2 times in 3). Like [`ACK_TO_COMMIT`] the pause
/// is the mutant's, standing for whatever a real receiver does between two transactions
/// it should have made one; with it a kill in flight `arrival conform` times after the
/// first commit (its `--kill-window-ms`, 5 by default, is shorter than the pause) lands
/// in the window every time.
pub const COMMIT_TO_COMMIT: Duration = Duration::from_millis(50);

/// [`Store::deliver_batch`] as the mutant does it.
pub fn deliver_batch(
    store: &mut Store,
    mutant: StoreMutant,
    incoming: &[Incoming],
    on_ack: &mut dyn FnMut(&Acknowledgement),
) -> Result<Vec<Acknowledgement>, StoreError> {
    match mutant {
        StoreMutant::AckBeforeCommit => store.retrying(|db| {
            db.begin(Isolation::Serial)?;
            let acks = deliver_batch_in(db, incoming)?;
            acks.iter().for_each(&mut *on_ack);
            std::thread::sleep(ACK_TO_COMMIT);
            db.commit()?;
            Ok(acks)
        }),
        StoreMutant::TwoTransactions => {
            let acks = store.retrying(|db| {
                db.begin(Isolation::Serial)?;
                let decided = decide(load_for_batch(db, incoming)?, incoming)?;
                decided.write_cards(db)?;
                // The cards are committed; the records that explain them are not yet.
                db.commit()?;
                std::thread::sleep(COMMIT_TO_COMMIT);
                db.begin(Isolation::Serial)?;
                decided.write_records(db)?;
                db.commit()?;
                Ok(decided.acks)
            })?;
            acks.iter().for_each(&mut *on_ack);
            Ok(acks)
        }
        StoreMutant::NoLock => {
            let acks = store.retrying(|db| read_then_lock(db, incoming))?;
            acks.iter().for_each(&mut *on_ack);
            Ok(acks)
        }
    }
}

/// `no-lock`'s step: read first (outside any transaction), then decide and write in a
/// transaction that protects nothing it read.
fn read_then_lock(
    db: &mut dyn Database,
    incoming: &[Incoming],
) -> Result<Vec<Acknowledgement>, DbError> {
    let loaded = load_for_batch(db, incoming)?;
    db.begin(Isolation::Weak)?;
    let decided = decide(loaded, incoming)?;
    decided.write_all(db)?;
    db.commit()?;
    Ok(decided.acks)
}
