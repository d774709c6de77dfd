//! The async device stream interface (in progress).
