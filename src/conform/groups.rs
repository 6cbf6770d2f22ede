//! The receivers' process groups that must not outlive arrival: each started group is
//! registered here, and `SIGTERM`, `SIGINT` or `SIGHUP` to arrival `SIGKILL`s every
//! registered group before arrival ends by the same signal.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// How many groups can be live at once (a run has one receiver, rarely a second).
const SLOTS: usize = 64;

/// The live groups; 0 is an empty slot. Atomics, so the signal handler may read them.
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];

static INSTALL: Once = Once::new();

/// The signals that end arrival and take its receivers with it.
const ENDING: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Registers a live process group (and installs the handler on first use); a full table
/// leaves the group unregistered.
pub fn register(group: libc::pid_t) {
    INSTALL.call_once(install);
    for slot in &GROUPS {
        if slot
            .compare_exchange(0, group, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return;
        }
    }
}

/// Forgets a group that was killed and reaped.
pub fn unregister(group: libc::pid_t) {
    for slot in &GROUPS {
        let _ = slot.compare_exchange(group, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// How many groups are registered (for tests).
pub fn live() -> usize {
    GROUPS
        .iter()
        .filter(|slot| slot.load(Ordering::SeqCst) != 0)
        .count()
}

fn install() {
    for signal in ENDING {
        // SAFETY: the handler only reads atomics and calls async-signal-safe functions
        // (killpg, signal, raise).
        unsafe {
            libc::signal(signal, on_ending as *const () as libc::sighandler_t);
        }
    }
}

extern "C" fn on_ending(signal: libc::c_int) {
    for slot in &GROUPS {
        let group = slot.load(Ordering::SeqCst);
        if group > 0 {
            // SAFETY: killpg is async-signal-safe; the group is one arrival started.
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
    }
    // SAFETY: restoring the default action and raising again is async-signal-safe, and
    // ends arrival as the signal would have.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_registered_once_and_forgotten() {
        let before = live();
        register(999_991);
        register(999_992);
        assert_eq!(live(), before + 2);
        unregister(999_991);
        unregister(999_992);
        assert_eq!(live(), before);
    }
}
