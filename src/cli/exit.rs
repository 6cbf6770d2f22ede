//! The exit statuses of `arrival`, one enum, each documented in `arrival --help`.

use super::error::Error;
use std::process::{ExitCode, Termination};

/// How a run of `arrival` ends, as its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Everything as expected: a model's expected verdict, a fixture's `expect`, a drill's
    /// checks.
    AsExpected = 0,
    /// Something is not as expected.
    NotAsExpected = 1,
    /// Bad input: the message names the file, the place and the problem.
    BadInput = 2,
    /// The environment failed: a database, Redis, a port, a child process that does not
    /// answer. The message names it.
    Environment = 3,
}

impl Exit {
    /// Every status, in order.
    pub const ALL: [Exit; 4] = [
        Exit::AsExpected,
        Exit::NotAsExpected,
        Exit::BadInput,
        Exit::Environment,
    ];

    /// The status as a number.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// What the status means, in one line of `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::AsExpected => {
                "everything as expected (a model's expected verdict, a fixture's expect)"
            }
            Exit::NotAsExpected => "something is not as expected",
            Exit::BadInput => "bad input: the message names the file, the place and the problem",
            Exit::Environment => {
                "the environment failed (a database, Redis, a port, a child process): the message names it"
            }
        }
    }

    /// The `Exit status:` section of `--help`.
    pub fn help() -> String {
        let mut text = String::from("Exit status:");
        for exit in Exit::ALL {
            text += &format!("\n  {}  {}", exit.code(), exit.meaning());
        }
        text
    }

    /// The status of a finished command: its result, with any error printed on stderr.
    pub fn of(result: Result<bool, Error>) -> Exit {
        match result {
            Ok(true) => Exit::AsExpected,
            Ok(false) => Exit::NotAsExpected,
            Err(error) => {
                eprintln!("arrival: {error}");
                match error {
                    Error::Input(_) => Exit::BadInput,
                    Error::Environment(_) => Exit::Environment,
                }
            }
        }
    }
}

impl Termination for Exit {
    fn report(self) -> ExitCode {
        ExitCode::from(self.code())
    }
}
