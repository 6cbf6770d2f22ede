//! Pipeline tests.
